//! CEL for admission: the environment ValidatingAdmissionPolicies and the match conditions
//! of policies and webhooks are compiled and evaluated in (kube-cel's Kubernetes
//! libraries over the `cel` interpreter, plus the `authorizer` library).
//!
//! ```text
//!  source ─► Expression::compile: parsed once; its free identifiers checked against what
//!            the configuration declares (object, oldObject, request, params,
//!            namespaceObject, authorizer, variables.NAME) ─► stored with its configuration
//!  a write ─► Inputs (object, oldObject, request, namespaceObject: those its expressions
//!            read (`Reads`), as CEL values, once)
//!          ─► Scope: params, variables (those read, in order), authorizer
//!          ─► Expression::evaluate ─► a CEL value, or why it could not be evaluated
//! ```
//!
//! The `authorizer` variable asks the server's authorizer as the request's user, in the
//! request's logical cluster: `authorizer.group('apps').resource('deployments')
//! .namespace('ns').name('web').check('update').allowed()`, `authorizer.path('/healthz')
//! .check('get')`, `authorizer.serviceAccount('ns', 'sa')…`, `authorizer.requestResource`
//! (the resource the request writes), and a decision's `allowed()`, `reason()`,
//! `errored()`, `error()`, as Kubernetes' library has them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use futures_util::FutureExt;
use kube_cel::KubeCelExt;
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, Map, Opaque};
use kube_cel::cel::{Context, ExecutionError, IdedExpr, Program, ResolveResult, Value as Cel};
use serde_json::Value;

use crate::auth::{Attributes as AuthzAttributes, Authorizer, Decision, UserInfo};

/// What an expression may name besides the three every expression has (`object`,
/// `oldObject`, `request`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Declarations<'a> {
    /// `params` (a policy with a `paramKind`).
    pub params: bool,
    /// `namespaceObject` (policies; not webhook match conditions).
    pub namespace_object: bool,
    /// `authorizer`.
    pub authorizer: bool,
    /// `variables.NAME` for these names (a variable sees those defined before it);
    /// `None`: no `variables` at all.
    pub variables: Option<&'a [String]>,
}

/// Identifiers that name types or function namespaces, never variables.
const BUILTIN_IDENTIFIERS: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "math",
    "sets",
    "strings",
    "lists",
    "base64",
    "format",
    "ip",
    "jsonpatch",
    "optional",
];

/// Which of a write's variables expressions read. A write's variables are made for an
/// evaluation only when some expression it runs reads them: `request` alone is a map of
/// some thirty values made from the request, and each variable is converted twice (to a
/// CEL value, then to the interpreter's own form) when it is declared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// `object`.
    pub object: bool,
    /// `oldObject`.
    pub old_object: bool,
    /// `request`.
    pub request: bool,
    /// `namespaceObject`.
    pub namespace_object: bool,
    /// `params`.
    pub params: bool,
    /// `authorizer`.
    pub authorizer: bool,
}

impl Reads {
    /// What an expression whose free identifiers are `free` reads.
    fn of(free: &[String]) -> Reads {
        let reads = |name: &str| free.iter().any(|n| n == name);
        Reads {
            object: reads("object"),
            old_object: reads("oldObject"),
            request: reads("request"),
            namespace_object: reads("namespaceObject"),
            params: reads("params"),
            authorizer: reads("authorizer"),
        }
    }
}

impl std::ops::BitOr for Reads {
    type Output = Reads;

    fn bitor(self, other: Reads) -> Reads {
        Reads {
            object: self.object || other.object,
            old_object: self.old_object || other.old_object,
            request: self.request || other.request,
            namespace_object: self.namespace_object || other.namespace_object,
            params: self.params || other.params,
            authorizer: self.authorizer || other.authorizer,
        }
    }
}

impl<'e> std::iter::FromIterator<&'e Expression> for Reads {
    fn from_iter<I: IntoIterator<Item = &'e Expression>>(expressions: I) -> Reads {
        expressions
            .into_iter()
            .fold(Reads::default(), |reads, e| reads | e.reads)
    }
}

/// A compiled CEL expression.
pub(crate) struct Expression {
    source: String,
    program: Program,
    /// The `variables.NAME` it reads.
    variables: Vec<String>,
    /// Which of the write's variables it reads.
    reads: Reads,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl Expression {
    /// Parses `source` and checks that it names only what `declared` allows: the error
    /// reads as Kubernetes' (`ERROR: <input>:1:1: …`, `undeclared reference to 'x'`).
    pub(crate) fn compile(source: &str, declared: Declarations<'_>) -> Result<Self, String> {
        if source.trim().is_empty() {
            return Err("ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>'".into());
        }
        let program = Program::compile(source).map_err(|e| e.to_string())?;
        let mut found = Found::default();
        walk(program.expression(), &mut Vec::new(), &mut found);
        for name in &found.free {
            let known = match name.as_str() {
                "object" | "oldObject" | "request" => true,
                "params" => declared.params,
                "namespaceObject" => declared.namespace_object,
                "authorizer" => declared.authorizer,
                "variables" => declared.variables.is_some(),
                other => BUILTIN_IDENTIFIERS.contains(&other),
            };
            if !known {
                return Err(format!(
                    "ERROR: <input>: undeclared reference to '{name}' (in container '')"
                ));
            }
        }
        if let Some(names) = declared.variables {
            for name in &found.variables {
                if !names.contains(name) {
                    return Err(format!("ERROR: <input>: undefined field '{name}'"));
                }
            }
        }
        Ok(Expression {
            source: source.to_owned(),
            program,
            reads: Reads::of(&found.free),
            variables: found.variables,
        })
    }

    /// The expression as written.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The `variables.NAME` it reads.
    pub(crate) fn variables(&self) -> &[String] {
        &self.variables
    }

    /// The parsed expression (for type checking).
    pub(crate) fn ast(&self) -> &IdedExpr {
        self.program.expression()
    }

    /// Evaluates it in `scope`.
    pub(crate) fn evaluate(&self, scope: &Context<'_>) -> Result<Cel, String> {
        self.program.execute(scope).map_err(|e| describe(&e))
    }

    /// Evaluates it in `scope` to a bool (a validation, a match condition); any other
    /// result is an error.
    pub(crate) fn evaluate_bool(&self, scope: &Context<'_>) -> Result<bool, String> {
        let failed = |why: String| format!("expression '{}' resulted in error: {why}", self.source);
        match self.evaluate(scope).map_err(failed)? {
            Cel::Bool(b) => Ok(b),
            other => Err(failed(format!(
                "no such overload: want bool, got {}",
                other.type_of()
            ))),
        }
    }
}

/// An interpreter error in Kubernetes' words where they differ.
fn describe(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::UndeclaredReference(name) => {
            format!("undeclared reference to '{name}'")
        }
        ExecutionError::NoSuchOverload => "no such overload".to_owned(),
        other => other.to_string(),
    }
}

/// What a walk of an expression found.
#[derive(Default)]
struct Found {
    /// Identifiers not bound by a comprehension, each once.
    free: Vec<String>,
    /// `variables.NAME`, each once.
    variables: Vec<String>,
}

fn walk(expr: &IdedExpr, bound: &mut Vec<String>, found: &mut Found) {
    use kube_cel::cel::common::ast::{EntryExpr, Expr};
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) && !found.free.contains(name) {
                found.free.push(name.clone());
            }
        }
        Expr::Select(select) => {
            if let Expr::Ident(name) = &select.operand.expr
                && name == "variables"
                && !bound.contains(name)
                && !found.variables.contains(&select.field)
            {
                found.variables.push(select.field.clone());
            }
            walk(&select.operand, bound, found);
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                // `math.greatest(…)`: a namespace, not a variable.
                let namespace = matches!(&target.expr, Expr::Ident(n)
                    if BUILTIN_IDENTIFIERS.contains(&n.as_str()) && !bound.contains(n));
                if !namespace {
                    walk(target, bound, found);
                }
            }
            for arg in &call.args {
                walk(arg, bound, found);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, found);
            walk(&c.accu_init, bound, found);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(second) = &c.iter_var2 {
                bound.push(second.clone());
            }
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, found);
            walk(&c.loop_step, bound, found);
            walk(&c.result, bound, found);
            bound.truncate(before);
        }
        Expr::List(list) => {
            for element in &list.elements {
                walk(element, bound, found);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    walk(&entry.key, bound, found);
                    walk(&entry.value, bound, found);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    walk(&field.value, bound, found);
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// A JSON value as CEL sees it: integers as `int` (as Kubernetes' unstructured objects
/// are), objects as maps with string keys.
pub(crate) fn value(json: &Value) -> Cel {
    match json {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(value).collect())),
        Value::Object(map) => {
            let map: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), value(v)))
                .collect();
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// A map of string keys, as CEL values.
pub(crate) fn map<'k>(entries: impl IntoIterator<Item = (&'k str, Cel)>) -> Cel {
    let map: HashMap<Key, Cel> = entries
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k.to_owned())), v))
        .collect();
    Cel::Map(Map { map: Arc::new(map) })
}

thread_local! {
    /// The CEL environment with every library, made once per thread (making one registers
    /// every function).
    static BASE: Context<'static> = base();
}

fn base() -> Context<'static> {
    let mut context = Context::default();
    context.register_all();
    authz::register(&mut context);
    context
}

/// Runs `f` with the environment every admission expression is evaluated in.
pub(crate) fn with_base<R>(f: impl FnOnce(&Context<'static>) -> R) -> R {
    BASE.with(f)
}

/// The `authorizer` variable of a write of `rt` (its `requestResource`): checks as the
/// writer, in the write's logical cluster, by the server's authorizer.
pub(crate) fn write_authorizer(
    attributes: &super::Attributes<'_>,
    rt: &crate::registry::resources::ResourceType,
) -> Cel {
    let request = authz::ResourceCheck {
        group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: attributes.subresource.to_owned(),
        namespace: attributes.namespace.to_owned(),
        name: attributes.name.to_owned(),
        ..authz::ResourceCheck::default()
    };
    authorizer(
        attributes.api.stages().authorizer.clone(),
        attributes.user.clone(),
        attributes.cluster(),
        request,
    )
}

/// The `authorizer` variable: checks as `user` in logical cluster `cluster`, by the
/// server's authorizer; `request` the resource a request writes (`requestResource`).
pub(crate) fn authorizer(
    authorizer: Arc<dyn Authorizer>,
    user: Arc<UserInfo>,
    cluster: &str,
    request: authz::ResourceCheck,
) -> Cel {
    let who = Arc::new(authz::Authz {
        authorizer,
        user,
        cluster: cluster.into(),
    });
    let resource = authz::ResourceCheck {
        authz: Some(who.clone()),
        ..request
    };
    map([
        (authz::HANDLE, Cel::Opaque(who)),
        ("requestResource", Cel::Opaque(Arc::new(resource))),
    ])
}

/// Kubernetes' CEL authorizer library.
pub(crate) mod authz {
    use super::*;

    /// The hidden key of the `authorizer` map holding whom it asks for.
    pub(crate) const HANDLE: &str = "\u{0}authorizer";

    /// An authorizer acting for one user in one logical cluster.
    pub(crate) struct Authz {
        pub(crate) authorizer: Arc<dyn Authorizer>,
        pub(crate) user: Arc<UserInfo>,
        pub(crate) cluster: Arc<str>,
    }

    impl fmt::Debug for Authz {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Authorizer({})", self.user.name)
        }
    }

    impl PartialEq for Authz {
        fn eq(&self, other: &Self) -> bool {
            Arc::ptr_eq(&self.user, &other.user) && self.cluster == other.cluster
        }
    }

    impl Eq for Authz {}

    impl Opaque for Authz {
        fn runtime_type_name(&self) -> &str {
            "kubernetes.authorization.Authorizer"
        }
    }

    /// A check of a resource (`group(…).resource(…)`, then optionally `subresource`,
    /// `namespace`, `name`).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub(crate) struct ResourceCheck {
        pub(crate) authz: Option<Arc<Authz>>,
        pub(crate) group: String,
        pub(crate) resource: String,
        pub(crate) subresource: String,
        pub(crate) namespace: String,
        pub(crate) name: String,
        /// Only a group so far (`group(…)` without `resource(…)`).
        pub(crate) group_only: bool,
    }

    impl Opaque for ResourceCheck {
        fn runtime_type_name(&self) -> &str {
            if self.group_only {
                "kubernetes.authorization.GroupCheck"
            } else {
                "kubernetes.authorization.ResourceCheck"
            }
        }
    }

    /// A check of a path that names no objects.
    #[derive(Debug, PartialEq, Eq)]
    struct PathCheck {
        authz: Arc<Authz>,
        path: String,
    }

    impl Opaque for PathCheck {
        fn runtime_type_name(&self) -> &str {
            "kubernetes.authorization.PathCheck"
        }
    }

    /// An authorizer's decision.
    #[derive(Debug, PartialEq, Eq)]
    struct Verdict {
        allowed: bool,
        reason: String,
        error: String,
    }

    impl Opaque for Verdict {
        fn runtime_type_name(&self) -> &str {
            "kubernetes.authorization.Decision"
        }
    }

    fn wrong(function: &str, what: &str) -> ExecutionError {
        ExecutionError::function_error(function, format!("{what} expected"))
    }

    fn who(this: &Cel, function: &str) -> Result<Arc<Authz>, ExecutionError> {
        if let Cel::Map(map) = this
            && let Some(Cel::Opaque(o)) = map.map.get(&Key::String(Arc::new(HANDLE.into())))
            && let Some(authz) = o.downcast_ref::<Authz>()
        {
            return Ok(Arc::new(Authz {
                authorizer: authz.authorizer.clone(),
                user: authz.user.clone(),
                cluster: authz.cluster.clone(),
            }));
        }
        Err(wrong(function, "an authorizer"))
    }

    fn resource_check(
        this: &Cel,
        function: &str,
        group_only: bool,
    ) -> Result<ResourceCheck, ExecutionError> {
        if let Cel::Opaque(o) = this
            && let Some(check) = o.downcast_ref::<ResourceCheck>()
            && check.group_only == group_only
        {
            return Ok(check.clone());
        }
        Err(wrong(
            function,
            if group_only {
                "a group check"
            } else {
                "a resource check"
            },
        ))
    }

    fn opaque(value: impl Opaque) -> ResolveResult {
        Ok(Cel::Opaque(Arc::new(value)))
    }

    fn group(This(this): This<Cel>, group: Arc<String>) -> ResolveResult {
        let authz = who(&this, "group")?;
        opaque(ResourceCheck {
            authz: Some(authz),
            group: group.to_string(),
            group_only: true,
            ..ResourceCheck::default()
        })
    }

    fn resource(This(this): This<Cel>, resource: Arc<String>) -> ResolveResult {
        let check = resource_check(&this, "resource", true)?;
        opaque(ResourceCheck {
            resource: resource.to_string(),
            group_only: false,
            ..check
        })
    }

    fn set(
        function: &'static str,
        this: &Cel,
        value: &str,
        field: fn(&mut ResourceCheck) -> &mut String,
    ) -> ResolveResult {
        let mut check = resource_check(this, function, false)?;
        *field(&mut check) = value.to_owned();
        opaque(check)
    }

    fn subresource(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
        set("subresource", &this, &value, |c| &mut c.subresource)
    }

    fn namespace(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
        set("namespace", &this, &value, |c| &mut c.namespace)
    }

    fn name(This(this): This<Cel>, value: Arc<String>) -> ResolveResult {
        set("name", &this, &value, |c| &mut c.name)
    }

    fn path(This(this): This<Cel>, path: Arc<String>) -> ResolveResult {
        let authz = who(&this, "path")?;
        opaque(PathCheck {
            authz,
            path: path.to_string(),
        })
    }

    fn service_account(
        This(this): This<Cel>,
        namespace: Arc<String>,
        name: Arc<String>,
    ) -> ResolveResult {
        let authz = who(&this, "serviceAccount")?;
        let user = UserInfo::new(
            &format!("system:serviceaccount:{namespace}:{name}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{namespace}"),
                crate::auth::AUTHENTICATED,
            ],
        );
        let handle = Arc::new(Authz {
            authorizer: authz.authorizer.clone(),
            user: Arc::new(user),
            cluster: authz.cluster.clone(),
        });
        Ok(map([(HANDLE, Cel::Opaque(handle))]))
    }

    /// Asks the authorizer; one that cannot answer at once (a remote authorizer) is an
    /// error of the check, not of the expression.
    fn decide(authz: &Authz, attributes: &AuthzAttributes<'_>) -> Verdict {
        match authz
            .authorizer
            .authorize(attributes)
            .into_future()
            .now_or_never()
        {
            Some(Decision::Allow) => Verdict {
                allowed: true,
                reason: String::new(),
                error: String::new(),
            },
            Some(Decision::Deny(reason)) => Verdict {
                allowed: false,
                reason,
                error: String::new(),
            },
            Some(Decision::NoOpinion) => Verdict {
                allowed: false,
                reason: String::new(),
                error: String::new(),
            },
            None => Verdict {
                allowed: false,
                reason: String::new(),
                error: "the authorizer cannot answer during admission".into(),
            },
        }
    }

    fn check(This(this): This<Cel>, verb: Arc<String>) -> ResolveResult {
        let Cel::Opaque(o) = &this else {
            return Err(wrong("check", "a resource or path check"));
        };
        if let Some(check) = o.downcast_ref::<ResourceCheck>()
            && !check.group_only
            && let Some(authz) = &check.authz
        {
            let attributes = AuthzAttributes {
                cluster: &authz.cluster,
                user: &authz.user,
                verb: &verb,
                resource_request: true,
                group: &check.group,
                version: "*",
                resource: &check.resource,
                subresource: &check.subresource,
                namespace: &check.namespace,
                name: &check.name,
                path: "",
            };
            return opaque(decide(authz, &attributes));
        }
        if let Some(check) = o.downcast_ref::<PathCheck>() {
            let attributes =
                AuthzAttributes::path(&check.authz.cluster, &check.authz.user, &verb, &check.path);
            return opaque(decide(&check.authz, &attributes));
        }
        Err(wrong("check", "a resource or path check"))
    }

    fn verdict<'v>(this: &'v Cel, function: &str) -> Result<&'v Verdict, ExecutionError> {
        if let Cel::Opaque(o) = this
            && let Some(v) = o.downcast_ref::<Verdict>()
        {
            return Ok(v);
        }
        Err(wrong(function, "a decision"))
    }

    fn allowed(This(this): This<Cel>) -> ResolveResult {
        Ok(Cel::Bool(verdict(&this, "allowed")?.allowed))
    }

    fn reason(This(this): This<Cel>) -> ResolveResult {
        Ok(Cel::String(Arc::new(
            verdict(&this, "reason")?.reason.clone(),
        )))
    }

    fn errored(This(this): This<Cel>) -> ResolveResult {
        Ok(Cel::Bool(!verdict(&this, "errored")?.error.is_empty()))
    }

    fn error(This(this): This<Cel>) -> ResolveResult {
        Ok(Cel::String(Arc::new(
            verdict(&this, "error")?.error.clone(),
        )))
    }

    /// Adds the library's functions.
    pub(crate) fn register(context: &mut Context<'static>) {
        context.add_function("group", group);
        context.add_function("resource", resource);
        context.add_function("subresource", subresource);
        context.add_function("namespace", namespace);
        context.add_function("name", name);
        context.add_function("path", path);
        context.add_function("serviceAccount", service_account);
        context.add_function("check", check);
        context.add_function("allowed", allowed);
        context.add_function("reason", reason);
        context.add_function("errored", errored);
        context.add_function("error", error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all() -> Declarations<'static> {
        Declarations {
            params: true,
            namespace_object: true,
            authorizer: true,
            variables: Some(&[]),
        }
    }

    fn eval(source: &str, object: Value) -> Result<Cel, String> {
        let expression = Expression::compile(source, all())?;
        with_base(|base| {
            let mut scope = base.new_inner_scope();
            scope.add_variable_from_value("object", value(&object));
            expression.evaluate(&scope)
        })
    }

    #[test]
    fn expressions_read_objects_with_the_kubernetes_libraries() {
        let deployment = json!({"metadata": {"name": "web", "namespace": "shop",
            "labels": {"app": "web"}}, "spec": {"replicas": 3, "template": {"spec": {
            "containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "x"}]}}}});
        let cases = [
            ("object.spec.replicas <= 5", Cel::Bool(true)),
            ("object.spec.replicas > 5", Cel::Bool(false)),
            ("object.metadata.namespace == 'shop'", Cel::Bool(true)),
            (
                "has(object.metadata.labels) && object.metadata.labels.app == 'web'",
                Cel::Bool(true),
            ),
            ("has(object.spec.paused)", Cel::Bool(false)),
            (
                "object.spec.template.spec.containers.all(c, c.image.contains(':'))",
                Cel::Bool(false),
            ),
            (
                "object.spec.template.spec.containers.exists(c, c.name == 'b')",
                Cel::Bool(true),
            ),
            ("size(object.spec.template.spec.containers)", Cel::Int(2)),
            (
                "'replicas: ' + string(object.spec.replicas)",
                Cel::String(Arc::new("replicas: 3".into())),
            ),
            (
                "object.metadata.name.upperAscii()",
                Cel::String(Arc::new("WEB".into())),
            ),
            ("math.greatest(1, 7, 3)", Cel::Int(7)),
            (
                "quantity('500m').isLessThan(quantity('1'))",
                Cel::Bool(true),
            ),
        ];
        for (source, expected) in cases {
            assert_eq!(eval(source, deployment.clone()), Ok(expected), "{source}");
        }
        let missing = eval("object.spec.paused", deployment).unwrap_err();
        assert!(missing.contains("no such key: paused"), "{missing}");
    }

    #[test]
    fn what_an_expression_names_is_checked_when_it_is_compiled() {
        let none = Declarations {
            variables: Some(&[]),
            ..Declarations::default()
        };
        let error = Expression::compile("params.max > 1", none).unwrap_err();
        assert!(
            error.contains("undeclared reference to 'params'"),
            "{error}"
        );
        assert!(Expression::compile("params.max > 1", all()).is_ok());
        let error = Expression::compile("obj.spec", all()).unwrap_err();
        assert!(error.contains("undeclared reference to 'obj'"), "{error}");
        // Variables bound by macros are not free.
        assert!(Expression::compile("object.items.all(x, x > 1)", all()).is_ok());
        let error = Expression::compile("object.spec.replicas >", all()).unwrap_err();
        assert!(error.starts_with("ERROR: <input>:1:"), "{error}");
        let declared = ["small".to_owned()];
        let with_variables = Declarations {
            variables: Some(&declared),
            ..all()
        };
        let compiled =
            Expression::compile("variables.small && !variables.small", with_variables).unwrap();
        assert_eq!(compiled.variables(), ["small"]);
        let error = Expression::compile("variables.big", with_variables).unwrap_err();
        assert!(error.contains("undefined field 'big'"), "{error}");
        assert!(
            Expression::compile(
                "authorizer.group('').resource('pods').check('get').allowed()",
                all()
            )
            .unwrap()
            .reads
            .authorizer
        );
    }

    #[test]
    fn an_expression_reads_the_variables_it_names_outside_its_comprehensions() {
        let reads = |source: &str| Expression::compile(source, all()).unwrap().reads;
        assert_eq!(
            reads("object.metadata.name.size() <= 63"),
            Reads {
                object: true,
                ..Reads::default()
            }
        );
        let all_of_them = reads(
            "[request.name, oldObject, namespaceObject, params].all(x, x != null) \
             && authorizer.path('/healthz').check('get').allowed() && has(object.spec)",
        );
        assert_eq!(
            all_of_them,
            Reads {
                object: true,
                old_object: true,
                request: true,
                namespace_object: true,
                params: true,
                authorizer: true,
            }
        );
        // A comprehension's own variable is not the write's, even when it is so named.
        assert_eq!(reads("[1, 2].all(request, request > 0)"), Reads::default());
        let union: Reads = [
            Expression::compile("object.x", all()).unwrap(),
            Expression::compile("request.uid != ''", all()).unwrap(),
        ]
        .iter()
        .collect();
        assert!(union.object && union.request && !union.old_object);
    }

    #[test]
    fn the_authorizer_answers_as_the_user_in_the_cluster() {
        use crate::auth::rbac::Rule;
        /// Allows reading pods in `shop` to `jane`, nothing else.
        struct JaneReadsPods;
        impl Authorizer for JaneReadsPods {
            fn authorize<'a>(
                &'a self,
                a: &'a AuthzAttributes<'a>,
            ) -> crate::api::Verdict<'a, Decision> {
                let allowed = a.user.name == "jane"
                    && a.cluster == "team"
                    && a.resource == "pods"
                    && a.namespace == "shop"
                    && a.verb == "get";
                crate::api::Verdict::Now(match allowed {
                    true => Decision::Allow,
                    false => Decision::Deny(format!("{} may not {}", a.user.name, a.verb)),
                })
            }
        }
        let _ = Rule::everything;
        let jane = Arc::new(UserInfo::new("jane", &["system:authenticated"]));
        let request = authz::ResourceCheck {
            resource: "pods".into(),
            namespace: "shop".into(),
            name: "p".into(),
            ..authz::ResourceCheck::default()
        };
        let variable = authorizer(Arc::new(JaneReadsPods), jane, "team", request);
        let run = |source: &str| {
            let expression = Expression::compile(source, all()).unwrap();
            with_base(|base| {
                let mut scope = base.new_inner_scope();
                scope.add_variable_from_value("authorizer", variable.clone());
                expression.evaluate(&scope)
            })
        };
        let yes = "authorizer.group('').resource('pods').namespace('shop').check('get').allowed()";
        assert_eq!(run(yes), Ok(Cel::Bool(true)));
        let no = "authorizer.group('').resource('pods').namespace('shop').check('delete')";
        assert_eq!(run(&format!("{no}.allowed()")), Ok(Cel::Bool(false)));
        assert_eq!(
            run(&format!("{no}.reason()")),
            Ok(Cel::String(Arc::new("jane may not delete".into())))
        );
        assert_eq!(run(&format!("{no}.errored()")), Ok(Cel::Bool(false)));
        assert_eq!(
            run("authorizer.requestResource.check('get').allowed()"),
            Ok(Cel::Bool(true))
        );
        let sa = "authorizer.serviceAccount('shop', 'bot').group('').resource('pods').namespace('shop').check('get').allowed()";
        assert_eq!(run(sa), Ok(Cel::Bool(false)));
        assert_eq!(
            run("authorizer.path('/healthz').check('get').allowed()"),
            Ok(Cel::Bool(false))
        );
    }
}
