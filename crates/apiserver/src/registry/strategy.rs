//! Per-resource strategies: what a resource does differently from the generic registry.
//!
//! ```text
//!  ResourceType.behaviour ─► strategy() ─► &'static dyn Strategy
//!    Plain                     every hook at its default
//!    Namespace                 Label names; finalizer `kubernetes`, phase Active; deletion
//!                              always waits for the server to empty it (Terminating)
//!    Service                   Label names; a cluster IP allocated from the service range
//!                              (`services`), what was allocated kept by an update
//!    Job                       a generated selector and its template's labels
//!                              (`controller-uid`, `job-name`) unless manualSelector
//!    Event                     one resource in two versions: read as the version asked
//!    CustomResourceDefinition  checked, status set, its resources served once stored,
//!                              unserved when it goes; deletion empties its resources
//!    CustomResource            refused while its definition is being deleted; read with
//!                              the version asked
//!    Review                    answered at once by the authorizer, never stored
//!    Rbac(kind)                path-segment names; defaulted, validated (roleRef fixed);
//!                              refused when it grants more than its writer holds;
//!                              answered once the RBAC authorizer applies it
//!    Secret                    a ServiceAccount token Secret names its account; type
//!                              immutable
//!    CertificateSigningRequest the requesting user written into the spec; spec immutable;
//!                              `approval` writes Approved/Denied alone (and needs
//!                              `approve` on the signer), `status` the rest
//!    Admission(kind)           ValidatingAdmissionPolicies, their bindings, webhook
//!                              configurations: defaulted, validated (CEL compiled, URLs,
//!                              caBundles); answered once dynamic admission applies them
//! ```
//!
//! The behaviour is chosen where a type is defined (the built-in table, a CRD's
//! registration); the generic code in `registry::store`, `registry::delete`
//! and `registry::list` only calls the hooks.

use crate::api::Verdict;
use flotilla_store::Revision;
use serde_json::{Value, json};

use crate::api::Api;
use crate::auth::UserInfo;
use crate::auth::rbac::Kind;
use crate::gc::collector::Cleanup;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::http::route::Target;
use crate::registry::object::{self, NameRule};
use crate::registry::resources::ResourceType;
use crate::registry::{certificates, crd, events, rbac, review, services};

/// Which strategy a resource type follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Behaviour {
    /// The generic registry's, unchanged.
    #[default]
    Plain,
    /// `v1` Namespaces.
    Namespace,
    /// `v1` Services.
    Service,
    /// `batch/v1` Jobs.
    Job,
    /// Events, of `v1` and of `events.k8s.io/v1`.
    Event,
    /// `apiextensions.k8s.io/v1` CustomResourceDefinitions.
    CustomResourceDefinition,
    /// A resource a CustomResourceDefinition serves.
    CustomResource,
    /// Reviews: self-reviews (`kubectl auth can-i`, `kubectl auth whoami`) and access
    /// reviews of another subject.
    Review,
    /// Roles and bindings (`rbac.authorization.k8s.io`).
    Rbac(Kind),
    /// `certificates.k8s.io/v1` CertificateSigningRequests.
    CertificateSigningRequest,
    /// `v1` Secrets.
    Secret,
    /// Admission configurations (`admissionregistration.k8s.io`).
    Admission(crate::admission::dynamic::Kind),
}

impl Behaviour {
    /// The behaviour of the built-in resource `plural` of `group`.
    pub fn builtin(group: &str, plural: &str) -> Self {
        match (group, plural) {
            ("", "namespaces") => Behaviour::Namespace,
            ("", "services") => Behaviour::Service,
            ("batch", "jobs") => Behaviour::Job,
            ("", "secrets") => Behaviour::Secret,
            ("" | events::GROUP, "events") => Behaviour::Event,
            (crd::GROUP, "customresourcedefinitions") => Behaviour::CustomResourceDefinition,
            (certificates::GROUP, "certificatesigningrequests") => {
                Behaviour::CertificateSigningRequest
            }
            ("authentication.k8s.io", "selfsubjectreviews")
            | (
                "authorization.k8s.io",
                "selfsubjectaccessreviews"
                | "selfsubjectrulesreviews"
                | "subjectaccessreviews"
                | "localsubjectaccessreviews",
            ) => Behaviour::Review,
            (crate::auth::rbac::GROUP, plural) => match Kind::of_plural(plural) {
                Some(kind) => Behaviour::Rbac(kind),
                None => Behaviour::Plain,
            },
            (crate::admission::dynamic::GROUP, plural) => {
                match crate::admission::dynamic::Kind::of_plural(plural) {
                    Some(kind) => Behaviour::Admission(kind),
                    None => Behaviour::Plain,
                }
            }
            _ => Behaviour::Plain,
        }
    }

    /// The strategy itself.
    pub(crate) fn strategy(self) -> &'static dyn Strategy {
        match self {
            Behaviour::Plain => &Plain,
            Behaviour::Namespace => &Namespaces,
            Behaviour::Service => &Services,
            Behaviour::Job => &Jobs,
            Behaviour::Event => &Events,
            Behaviour::CustomResourceDefinition => &Definitions,
            Behaviour::CustomResource => &CustomResources,
            Behaviour::Review => &Reviews,
            Behaviour::Rbac(Kind::Role) => &RbacObjects(Kind::Role),
            Behaviour::Rbac(Kind::ClusterRole) => &RbacObjects(Kind::ClusterRole),
            Behaviour::Rbac(Kind::RoleBinding) => &RbacObjects(Kind::RoleBinding),
            Behaviour::Rbac(Kind::ClusterRoleBinding) => &RbacObjects(Kind::ClusterRoleBinding),
            Behaviour::CertificateSigningRequest => &SigningRequests,
            Behaviour::Secret => &Secrets,
            Behaviour::Admission(kind) => admission_objects(kind),
        }
    }
}

/// What a write of an object means beyond storing it, to be carried out once it is stored
/// (or once it is gone).
pub(crate) enum Effect {
    /// Nothing.
    None,
    /// A CustomResourceDefinition: what it defines, and whether its names can be served.
    Defines(crd::Definition, bool),
}

/// What a write reserved ([`Strategy::allocate`]): held once the object is stored
/// ([`Allocation::commit`]), released if it is dropped before.
#[derive(Default)]
pub(crate) struct Allocation(
    Option<services::Reservation>,
    Vec<services::PortReservation>,
);

impl Allocation {
    /// The object is stored: what was reserved for it is held.
    pub(crate) async fn commit(self) {
        if let Some(reservation) = self.0 {
            reservation.commit().await;
        }
        for port in self.1 {
            port.commit();
        }
    }
}

/// The hooks a resource's strategy may fill; each default is the generic registry's
/// behaviour.
pub(crate) trait Strategy: Send + Sync {
    /// The rule the objects' names follow.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// The answer to a create of `request` to `target` that is not stored (a review), or
    /// `None` to store it.
    fn answer<'a>(
        &'a self,
        _api: &'a Api,
        _target: &'a Target,
        _request: &'a Value,
    ) -> Option<Verdict<'a, ApiResult<Value>>> {
        None
    }

    /// Sets what the server owns on a new object: by default, a type with a status
    /// subresource starts without a status.
    fn prepare_create(&self, rt: &ResourceType, object: &mut Value) {
        if rt.has_status()
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
    }

    /// Whether [`Strategy::complete_write`] needs the object a client sent to an update
    /// (`requested`), besides the one about to be written.
    fn reads_request(&self) -> bool {
        false
    }

    /// Completes and checks a write by `user` before admission: a create (`current` is
    /// `Null`), or an update through subresource `sub` (`""` for the object itself) of
    /// `current`, as stored, where `requested` is what the client sent (`Null` unless
    /// [`Strategy::reads_request`]). A refusal is answered and nothing is written.
    fn complete_write(
        &self,
        _user: &UserInfo,
        _sub: &str,
        _object: &mut Value,
        _current: &Value,
        _requested: &Value,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// Checks the API's state before a create.
    fn before_create<'a>(
        &'a self,
        _api: &'a Api,
        _rt: &'a ResourceType,
    ) -> Verdict<'a, ApiResult<()>> {
        Verdict::Now(Ok(()))
    }

    /// Checks and completes an object about to be written; `previous_status` is the
    /// stored object's status (`Null` on a create).
    fn admit(
        &self,
        _api: &Api,
        _object: &mut Value,
        _previous_status: &Value,
    ) -> ApiResult<Effect> {
        Ok(Effect::None)
    }

    /// Checks a write of `object` to `target` (`old`: the stored object, on an update)
    /// against what its writer holds and the API's state, and fills its defaults: a role
    /// or binding must not grant more than its writer holds. Runs before anything is
    /// written, dry runs included.
    fn check_write<'a>(
        &'a self,
        _api: &'a Api,
        _target: &'a Target,
        _object: &'a mut Value,
        _old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<()>> {
        Verdict::Now(Ok(()))
    }

    /// Allocates what the server gives an object (a Service's cluster IP, a Job's
    /// selector): on a create (`old` is `None`), or on an update of `old` that needs it
    /// now. Runs after admission and after the fields' owners are recorded (nobody owns
    /// what the server allocates, as in Kubernetes), dry runs included (what they reserve
    /// is released; `dry_run` says so, to reserve in memory alone). A refusal is answered and
    /// nothing is written.
    fn allocate<'a>(
        &'a self,
        _api: &'a Api,
        _object: &'a mut Value,
        _old: Option<&'a Value>,
        _dry_run: bool,
    ) -> Verdict<'a, ApiResult<Allocation>> {
        Verdict::Now(Ok(Allocation::default()))
    }

    /// The object was stored.
    fn written(&self, _api: &Api, _effect: &Effect) {}

    /// A write (or deletion) of the object stored at `revision` is answered once this
    /// completes: a role or binding once the authorizer decides with it.
    fn settle<'a>(&'a self, _api: &'a Api, _revision: Revision) -> Verdict<'a, ()> {
        Verdict::Now(())
    }

    /// The object is gone (its last finalizer removed).
    fn removed(&self, _api: &Api, _effect: &Effect) {}

    /// Whether a deletion always waits for the server's own cleanup, finalizers or not.
    fn finalized_by_server(&self) -> bool {
        false
    }

    /// Marks an object whose deletion begins (beyond its deletionTimestamp).
    fn begin_deletion(&self, _object: &mut Value) {}

    /// The server's cleanup once the deletion of the object `name` has begun.
    fn cleanup(&self, _name: &str) -> Option<Cleanup> {
        None
    }

    /// The server's cleanup after a stored object that could not be read was deleted.
    fn cleanup_unreadable(&self, _name: &str) -> Option<Cleanup> {
        None
    }

    /// The apiVersion objects are shown with when stored through another version (no
    /// conversion beyond it, see [`events::show_as`]), or `None` to show them as stored.
    fn reads_as(&self, _rt: &ResourceType) -> Option<String> {
        None
    }

    /// Shows an object read for an update or patch as the request's version.
    fn show_on_read(&self, _object: &mut Value, _rt: &ResourceType) {}
}

struct Plain;
impl Strategy for Plain {}

struct Namespaces;

impl Strategy for Namespaces {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn prepare_create(&self, _rt: &ResourceType, object: &mut Value) {
        object["spec"]["finalizers"] = json!(["kubernetes"]);
        object["status"] = json!({"phase": "Active"});
    }

    fn finalized_by_server(&self) -> bool {
        true
    }

    fn begin_deletion(&self, object: &mut Value) {
        object["status"]["phase"] = json!("Terminating");
    }

    fn cleanup(&self, name: &str) -> Option<Cleanup> {
        Some(Cleanup::Namespace(name.to_owned()))
    }

    fn cleanup_unreadable(&self, name: &str) -> Option<Cleanup> {
        self.cleanup(name)
    }
}

struct Services;

impl Strategy for Services {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    /// An update keeps the cluster IPs and node ports the client left out.
    fn complete_write(
        &self,
        _user: &UserInfo,
        sub: &str,
        object: &mut Value,
        current: &Value,
        _requested: &Value,
    ) -> ApiResult<()> {
        if !current.is_null() && sub.is_empty() {
            services::keep_allocated(object, current);
        }
        Ok(())
    }

    fn allocate<'a>(
        &'a self,
        api: &'a Api,
        object: &'a mut Value,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> Verdict<'a, ApiResult<Allocation>> {
        Verdict::Later(Box::pin(async move {
            let ip = services::allocate(api, object, old, dry_run).await?;
            let ports = services::allocate_node_ports(api, object, old).await?;
            Ok(Allocation(ip, ports))
        }))
    }
}

struct Jobs;

impl Strategy for Jobs {
    fn allocate<'a>(
        &'a self,
        _api: &'a Api,
        object: &'a mut Value,
        old: Option<&'a Value>,
        _dry_run: bool,
    ) -> Verdict<'a, ApiResult<Allocation>> {
        if old.is_none() {
            let outcome = crate::registry::jobs::generate_selector(object);
            return Verdict::Now(outcome.map(|()| Allocation::default()));
        }
        Verdict::Now(Ok(Allocation::default()))
    }
}

struct Events;

impl Strategy for Events {
    fn reads_as(&self, rt: &ResourceType) -> Option<String> {
        Some(rt.api_version())
    }

    fn show_on_read(&self, object: &mut Value, rt: &ResourceType) {
        events::show_as(object, &rt.api_version());
    }
}

struct Definitions;

impl Strategy for Definitions {
    fn admit(&self, api: &Api, object: &mut Value, previous_status: &Value) -> ApiResult<Effect> {
        let definition = crd::admit(object)?;
        let clash = crd::conflict(&definition, &api.registry);
        let terminating = !object["metadata"]["deletionTimestamp"].is_null();
        if previous_status.is_null() {
            let meta = object::metadata_mut(object)?;
            let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut()
                && !list.iter().any(|f| f == crd::CLEANUP_FINALIZER)
            {
                list.push(json!(crd::CLEANUP_FINALIZER));
            }
        }
        object["status"] = crd::status(&definition, clash.as_deref(), previous_status, terminating);
        Ok(Effect::Defines(definition, clash.is_none()))
    }

    fn written(&self, api: &Api, effect: &Effect) {
        if let Effect::Defines(definition, true) = effect {
            crd::register(&api.registry, definition);
        }
    }

    fn removed(&self, api: &Api, effect: &Effect) {
        if let Effect::Defines(definition, _) = effect {
            crd::unregister(&api.registry, &definition.group, &definition.plural);
        }
    }

    fn begin_deletion(&self, object: &mut Value) {
        if let Ok(definition) = crd::admit(&mut object.clone()) {
            let previous = object["status"].clone();
            object["status"] = crd::status(&definition, None, &previous, true);
        }
    }

    fn cleanup(&self, name: &str) -> Option<Cleanup> {
        Some(Cleanup::CustomResources(name.to_owned()))
    }
}

struct CustomResources;

impl Strategy for CustomResources {
    /// New custom resources are refused while their definition is being deleted.
    fn before_create<'a>(
        &'a self,
        api: &'a Api,
        rt: &'a ResourceType,
    ) -> Verdict<'a, ApiResult<()>> {
        Verdict::Later(Box::pin(async move {
            let crd_type = api.resource(crd::GROUP, "v1", "customresourcedefinitions")?;
            let name = format!("{}.{}", rt.plural, rt.group);
            match api.get(&crd_type, "", &name).await {
                Ok((crd, _)) if crd["metadata"]["deletionTimestamp"].is_null() => Ok(()),
                Ok(_) => Err(ApiError::method_not_allowed(
                    "create",
                    &format!("{name}: the CustomResourceDefinition is being deleted"),
                )),
                Err(e) if e.reason == Reason::NotFound => Err(ApiError::no_route(&rt.plural)),
                Err(e) => Err(e),
            }
        }))
    }

    fn reads_as(&self, rt: &ResourceType) -> Option<String> {
        Some(rt.api_version())
    }
}

struct Reviews;

impl Strategy for Reviews {
    fn answer<'a>(
        &'a self,
        api: &'a Api,
        target: &'a Target,
        request: &'a Value,
    ) -> Option<Verdict<'a, ApiResult<Value>>> {
        Some(Verdict::Later(Box::pin(review::answer(
            api, target, request,
        ))))
    }
}

/// Roles and bindings, of one kind.
struct RbacObjects(Kind);

impl Strategy for RbacObjects {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn check_write<'a>(
        &'a self,
        api: &'a Api,
        target: &'a Target,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<()>> {
        let kind = self.0;
        rbac::default(kind, object);
        let causes = rbac::validate(kind, object, old);
        if !causes.is_empty() {
            let name = object::meta_str(object, "name");
            let rt = &target.rt;
            return Verdict::Now(Err(ApiError::invalid(&rt.group, &rt.kind, name, causes)));
        }
        let object = &*object;
        Verdict::Later(Box::pin(rbac::check_escalation(
            api, target, kind, object, old,
        )))
    }

    fn settle<'a>(&'a self, api: &'a Api, revision: Revision) -> Verdict<'a, ()> {
        match &api.rbac {
            Some(rbac) => Verdict::Later(Box::pin(rbac.settled(revision))),
            None => Verdict::Now(()),
        }
    }
}

struct SigningRequests;

impl Strategy for SigningRequests {
    fn reads_request(&self) -> bool {
        true
    }

    fn complete_write(
        &self,
        user: &UserInfo,
        sub: &str,
        object: &mut Value,
        current: &Value,
        requested: &Value,
    ) -> ApiResult<()> {
        if current.is_null() {
            certificates::admit_create(user, object)
        } else {
            certificates::admit_update(sub, object, current, requested)
        }
    }

    /// An approval or denial needs `approve` on the request's signer.
    fn check_write<'a>(
        &'a self,
        api: &'a Api,
        target: &'a Target,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<()>> {
        if old.is_none() || target.sub.as_deref() != Some("approval") {
            return Verdict::Now(Ok(()));
        }
        let object = &*object;
        Verdict::Later(Box::pin(certificates::check_approver(
            api,
            &target.user,
            &api.cluster,
            object,
        )))
    }
}

struct Secrets;

impl Strategy for Secrets {
    /// As Kubernetes validates a Secret: one of type
    /// `kubernetes.io/service-account-token` names its ServiceAccount (the tokens
    /// controller fills it), and a Secret's type never changes.
    fn complete_write(
        &self,
        _user: &UserInfo,
        _sub: &str,
        object: &mut Value,
        current: &Value,
        _requested: &Value,
    ) -> ApiResult<()> {
        use crate::auth::serviceaccount::controller::{NAME_ANNOTATION, TOKEN_SECRET_TYPE};
        let kind = |o: &Value| o["type"].as_str().unwrap_or("Opaque").to_owned();
        let mut causes = Vec::new();
        if object["type"] == TOKEN_SECRET_TYPE
            && object["metadata"]["annotations"][NAME_ANNOTATION]
                .as_str()
                .is_none_or(str::is_empty)
        {
            causes.push(crate::http::error::Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: format!("metadata.annotations[{NAME_ANNOTATION}]"),
            });
        }
        if !current.is_null() && kind(object) != kind(current) {
            causes.push(crate::http::error::Cause {
                reason: "FieldValueInvalid".into(),
                message: "field is immutable".into(),
                field: "type".into(),
            });
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(
            "",
            "Secret",
            object::meta_str(object, "name"),
            causes,
        ))
    }
}

/// Admission configurations, of one kind.
struct AdmissionObjects(crate::admission::dynamic::Kind);

fn admission_objects(kind: crate::admission::dynamic::Kind) -> &'static dyn Strategy {
    use crate::admission::dynamic::Kind as K;
    match kind {
        K::Policy => &AdmissionObjects(K::Policy),
        K::Binding => &AdmissionObjects(K::Binding),
        K::Validating => &AdmissionObjects(K::Validating),
        K::Mutating => &AdmissionObjects(K::Mutating),
    }
}

impl Strategy for AdmissionObjects {
    fn check_write<'a>(
        &'a self,
        _api: &'a Api,
        target: &'a Target,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<()>> {
        let causes = crate::admission::dynamic::default_and_validate(self.0, object, old);
        if causes.is_empty() {
            return Verdict::Now(Ok(()));
        }
        let name = object::meta_str(object, "name");
        let rt = &target.rt;
        Verdict::Now(Err(ApiError::invalid(&rt.group, &rt.kind, name, causes)))
    }

    fn settle<'a>(&'a self, api: &'a Api, revision: Revision) -> Verdict<'a, ()> {
        Verdict::Later(Box::pin(api.admission.settled(revision)))
    }
}
