//! RBAC on a real `flotilla hub` with the real kubectl, as several users: here the admin
//! impersonating them (`kubectl --as alice --as-group team-a`, `--as
//! system:serviceaccount:shop:ci`), so that the request runs as that user through every
//! later stage. `access.rs` does the same with the users' own credentials.

mod support;

use support::identity::{assert_forbidden, text};
use support::{Hub, eventually};

/// kubectl as `user` in `groups`.
fn as_user<'a>(user: &'a str, groups: &[&'a str], args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--as", user];
    for group in groups {
        all.extend(["--as-group", *group]);
    }
    all.extend_from_slice(args);
    all
}

/// Runs kubectl, which must succeed; its stdout.
fn ok(hub: &Hub, args: &[&str]) -> String {
    let out = hub.kubectl(args);
    assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs kubectl, which must be refused with 403; its stderr.
fn forbidden(hub: &Hub, args: &[&str]) -> String {
    assert_forbidden(args, &hub.kubectl(args))
}

/// `kubectl auth can-i …`: whether the answer is yes.
fn can_i(hub: &Hub, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let out = hub.kubectl(&all);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => true,
        "no" => false,
        _ => panic!("kubectl {all:?}: {}", text(&out)),
    }
}

const ALICE: (&str, &[&str]) = ("alice", &["team-a"]);
const CI: &str = "system:serviceaccount:shop:ci";

fn alice<'a>(args: &[&'a str]) -> Vec<&'a str> {
    as_user(ALICE.0, ALICE.1, args)
}

#[test]
fn a_namespaced_editor_works_in_its_namespace_and_nowhere_else() {
    let hub = Hub::start();
    ok(&hub, &["create", "namespace", "shop"]);
    ok(&hub, &["create", "serviceaccount", "ci", "-n", "shop"]);
    // Before any binding: nothing but discovery and questions about itself.
    forbidden(&hub, &alice(&["get", "deployments", "-n", "shop"]));
    ok(
        &hub,
        &[
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
            "-n",
            "shop",
        ],
    );
    ok(
        &hub,
        &[
            "create",
            "rolebinding",
            "ci-edit",
            "--clusterrole=edit",
            "--serviceaccount=shop:ci",
            "-n",
            "shop",
        ],
    );
    for who in [alice(&[]), as_user(CI, &[], &[])] {
        let run = |args: &[&'static str]| {
            let mut all = who.clone();
            all.extend_from_slice(args);
            all
        };
        // The binding is in force once its create is answered.
        ok(
            &hub,
            &run(&["create", "deployment", "web", "--image=nginx", "-n", "shop"]),
        );
        ok(&hub, &run(&["delete", "deployment", "web", "-n", "shop"]));
        let user = who[1];
        let refused = forbidden(
            &hub,
            &run(&[
                "create",
                "deployment",
                "web",
                "--image=nginx",
                "-n",
                "default",
            ]),
        );
        assert!(
            refused.contains(&format!(
                "deployments.apps is forbidden: User \"{user}\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"default\""
            )),
            "{refused}"
        );
        let refused = forbidden(&hub, &run(&["get", "secrets", "-n", "kube-system"]));
        assert!(
            refused.contains(&format!(
                "secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
            )),
            "{refused}"
        );
        let refused = forbidden(&hub, &run(&["get", "clusterrolebindings"]));
        assert!(
            refused.contains(&format!(
                "clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"{user}\" cannot list resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
            )),
            "{refused}"
        );
    }
    // Lists and watches: in shop, yes; across namespaces, no.
    ok(
        &hub,
        &alice(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=a=1",
            "-n",
            "shop",
        ]),
    );
    let names = ok(
        &hub,
        &alice(&["get", "configmaps", "-n", "shop", "-o", "name"]),
    );
    assert!(names.contains("configmap/settings"), "{names}");
    let watched = ok(
        &hub,
        &alice(&[
            "get",
            "--raw",
            "/api/v1/namespaces/shop/configmaps?watch=true&timeoutSeconds=1",
        ]),
    );
    assert!(
        watched.contains("\"type\":\"ADDED\"") && watched.contains("settings"),
        "{watched}"
    );
    let refused = forbidden(&hub, &alice(&["get", "configmaps", "--all-namespaces"]));
    assert!(
        refused
            .contains("cannot list resource \"configmaps\" in API group \"\" at the cluster scope"),
        "{refused}"
    );
    forbidden(
        &hub,
        &alice(&[
            "get",
            "--raw",
            "/api/v1/configmaps?watch=true&timeoutSeconds=1",
        ]),
    );
    // What it may do, as kubectl lists it.
    let rules = ok(&hub, &alice(&["auth", "can-i", "--list", "-n", "shop"]));
    let line = |resource: &str| {
        rules
            .lines()
            .find(|l| l.split_whitespace().next() == Some(resource))
            .unwrap_or_else(|| panic!("no {resource} in\n{rules}"))
            .to_owned()
    };
    assert!(line("deployments.apps").contains("create"), "{rules}");
    assert!(
        line("selfsubjectaccessreviews.authorization.k8s.io").contains("[create]"),
        "{rules}"
    );
    assert!(
        !rules.lines().any(|l| l.starts_with("roles.rbac")),
        "edit grants no roles: {rules}"
    );
    let elsewhere = ok(&hub, &alice(&["auth", "can-i", "--list", "-n", "default"]));
    assert!(!elsewhere.contains("deployments.apps"), "{elsewhere}");
    assert!(can_i(
        &hub,
        &alice(&["create", "deployments", "-n", "shop"])
    ));
    assert!(!can_i(
        &hub,
        &alice(&["create", "deployments", "-n", "default"])
    ));
    assert!(can_i(
        &hub,
        &as_user(CI, &[], &["list", "secrets", "-n", "shop"])
    ));
    assert!(!can_i(
        &hub,
        &as_user(CI, &[], &["list", "secrets", "-n", "kube-system"])
    ));
    // Revoked: refused at once.
    ok(&hub, &["delete", "rolebinding", "alice-edit", "-n", "shop"]);
    forbidden(&hub, &alice(&["get", "configmaps", "-n", "shop"]));
}

#[test]
fn a_cluster_viewer_reads_everywhere_and_a_user_without_bindings_only_discovers() {
    let hub = Hub::start();
    ok(&hub, &["create", "namespace", "shop"]);
    ok(
        &hub,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=a=1",
            "-n",
            "shop",
        ],
    );
    ok(
        &hub,
        &[
            "create",
            "clusterrolebinding",
            "team-a-view",
            "--clusterrole=view",
            "--group=team-a",
        ],
    );
    let reader = |args: &[&'static str]| alice(args);
    for namespace in ["shop", "default", "kube-system"] {
        ok(&hub, &reader(&["get", "configmaps", "-n", namespace]));
        ok(&hub, &reader(&["get", "deployments", "-n", namespace]));
    }
    ok(&hub, &reader(&["get", "configmaps", "--all-namespaces"]));
    ok(&hub, &reader(&["get", "namespaces"]));
    // view reads no secrets (as upstream's), and writes nothing.
    forbidden(&hub, &reader(&["get", "secrets", "-n", "shop"]));
    forbidden(&hub, &reader(&["create", "configmap", "x", "-n", "shop"]));
    forbidden(
        &hub,
        &reader(&["delete", "configmap", "settings", "-n", "shop"]),
    );
    forbidden(
        &hub,
        &reader(&["label", "configmap", "settings", "a=b", "-n", "shop"]),
    );
    forbidden(&hub, &reader(&["delete", "namespace", "shop"]));
    ok(&hub, &["get", "configmap", "settings", "-n", "shop"]);

    // dave has no bindings: discovery, /version and questions about himself.
    let dave = |args: &[&'static str]| as_user("dave", &[], args);
    ok(&hub, &dave(&["api-resources"]));
    ok(&hub, &dave(&["version"]));
    ok(&hub, &dave(&["get", "--raw", "/version"]));
    let whoami = ok(&hub, &dave(&["auth", "whoami", "-o", "json"]));
    assert!(whoami.contains("\"username\": \"dave\""), "{whoami}");
    assert!(!can_i(&hub, &dave(&["get", "pods"])));
    let rules = ok(&hub, &dave(&["auth", "can-i", "--list"]));
    assert!(
        rules.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{rules}"
    );
    for args in [
        &["get", "pods"][..],
        &["get", "namespaces"],
        &["get", "configmaps", "-n", "shop"],
        &["get", "clusterroles"],
        &["get", "--raw", "/metrics"],
        &["create", "namespace", "mine"],
    ] {
        forbidden(&hub, &dave(args));
    }
}

#[test]
fn escalation_is_refused_until_bind_is_given_and_impersonation_needs_its_verb() {
    let audit = tempfile::tempdir().unwrap();
    let log = audit.path().join("audit.log");
    let hub = Hub::start_with(&["--audit-log-path", log.to_str().unwrap()]);
    ok(&hub, &["create", "namespace", "shop"]);
    ok(
        &hub,
        &[
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole=edit",
            "--user=alice",
            "-n",
            "shop",
        ],
    );
    // alice may also write bindings in shop (what `edit` alone does not give).
    ok(
        &hub,
        &[
            "create",
            "role",
            "binder",
            "--verb=create,get,update",
            "--resource=rolebindings",
            "-n",
            "shop",
        ],
    );
    ok(
        &hub,
        &[
            "create",
            "rolebinding",
            "alice-binder",
            "--role=binder",
            "--user=alice",
            "-n",
            "shop",
        ],
    );
    for role in ["admin", "cluster-admin"] {
        let name = format!("bob-{role}");
        let clusterrole = format!("--clusterrole={role}");
        let refused = forbidden(
            &hub,
            &alice(&[
                "create",
                "rolebinding",
                &name,
                &clusterrole,
                "--user=bob",
                "-n",
                "shop",
            ]),
        );
        assert!(
            refused.contains(&format!(
                "rolebindings.rbac.authorization.k8s.io \"{name}\" is forbidden: user \"alice\" (groups=[\"team-a\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"
            )),
            "{refused}"
        );
    }
    // What she holds she may grant.
    ok(
        &hub,
        &alice(&[
            "create",
            "rolebinding",
            "bob-edit",
            "--clusterrole=edit",
            "--user=bob",
            "-n",
            "shop",
        ]),
    );
    // Given `bind` on admin and cluster-admin, she may bind them.
    ok(
        &hub,
        &[
            "create",
            "role",
            "bind-admins",
            "--verb=bind",
            "--resource=clusterroles",
            "--resource-name=admin",
            "--resource-name=cluster-admin",
            "-n",
            "shop",
        ],
    );
    ok(
        &hub,
        &[
            "create",
            "rolebinding",
            "alice-bind",
            "--role=bind-admins",
            "--user=alice",
            "-n",
            "shop",
        ],
    );
    for role in ["admin", "cluster-admin"] {
        let name = format!("bob-{role}");
        let clusterrole = format!("--clusterrole={role}");
        ok(
            &hub,
            &alice(&[
                "create",
                "rolebinding",
                &name,
                &clusterrole,
                "--user=bob",
                "-n",
                "shop",
            ]),
        );
    }
    // The role a binding names does not change.
    let binding = ok(
        &hub,
        &["get", "rolebinding", "bob-edit", "-n", "shop", "-o", "json"],
    );
    let changed = binding.replace("\"name\": \"edit\"", "\"name\": \"view\"");
    let out = hub.kubectl_with(&["replace", "-f", "-"], Some(&changed));
    assert!(!out.status.success());
    assert!(
        text(&out).contains("cannot change roleRef"),
        "{}",
        text(&out)
    );

    // Impersonation: the admin may; ci and alice may not (their rules say so).
    assert!(can_i(&hub, &["impersonate", "users"]));
    assert!(!can_i(&hub, &as_user(CI, &[], &["impersonate", "users"])));
    assert!(!can_i(&hub, &alice(&["impersonate", "users/bob"])));
    assert!(!can_i(
        &hub,
        &alice(&["impersonate", "groups/system:masters"])
    ));
    // edit may impersonate the service accounts of its namespace (upstream's edit).
    assert!(can_i(
        &hub,
        &alice(&["impersonate", "serviceaccounts/ci", "-n", "shop"])
    ));
    // The audit log names who acted as whom.
    let whoami = ok(&hub, &alice(&["auth", "whoami", "-o", "json"]));
    assert!(whoami.contains("\"username\": \"alice\""), "{whoami}");
    eventually("the audit log records the impersonated user", || {
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        lines
            .lines()
            .filter(|l| l.contains("selfsubjectreviews") && l.contains("\"ResponseComplete\""))
            .find(|l| l.contains("\"impersonatedUser\":{\"username\":\"alice\""))
            .map(|_| ())
            .ok_or_else(|| "no such event yet".to_owned())
    });
}
