//! Built-in kinds on the hub as a cluster treats them, through the real kubectl: a body
//! that does not decode is a 400 naming the field, an invalid object a 422, an immutable
//! field stays, and the documentation's Service and Deployment read back defaulted; a
//! Service gets a cluster IP of `--service-cidr` (never one another holds, across a
//! restart), a NodePort Service node ports of `--service-node-port-range`, a Job its
//! generated selector and labels.

mod support;

use support::Hub;

const THREE: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: three}
spec:
  replicas: "three"
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

/// The Service of the Kubernetes documentation ("Defining a Service").
const DOCS_SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - protocol: TCP
      port: 80
      targetPort: 9376
"#;

/// The Deployment of the Kubernetes documentation ("Creating a Deployment").
const DOCS_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
"#;

fn refused(hub: &Hub, manifest: &str) -> String {
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(manifest));
    assert!(!out.status.success(), "{manifest} was accepted");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn invalid_built_in_objects_are_refused_as_kubernetes_refuses_them() {
    let hub = Hub::start();
    // A field that does not decode: 400, naming it.
    let stderr = refused(&hub, THREE);
    assert!(stderr.contains("(BadRequest)"), "{stderr}");
    assert!(stderr.contains("spec.replicas"), "{stderr}");
    assert!(
        hub.fails(&["get", "deployment", "three"])
            .contains("NotFound")
    );

    // A Service port out of range: 422.
    let service = DOCS_SERVICE.replace("port: 80", "port: 70000");
    let stderr = refused(&hub, &service);
    assert!(stderr.contains("is invalid"), "{stderr}");
    assert!(stderr.contains("spec.ports[0].port"), "{stderr}");

    // A selector that does not match the template's labels: 422.
    let mismatch = DOCS_DEPLOYMENT.replace(
        "    matchLabels:\n      app: nginx",
        "    matchLabels:\n      app: web",
    );
    let stderr = refused(&hub, &mismatch);
    assert!(stderr.contains("is invalid"), "{stderr}");
    assert!(
        stderr.contains("spec.template.metadata.labels") && stderr.contains("does not match"),
        "{stderr}"
    );
    // A 64-character label value: 422.
    let long = DOCS_DEPLOYMENT.replace(
        "  labels:\n    app: nginx\nspec",
        &format!("  labels:\n    app: {}\nspec", "n".repeat(64)),
    );
    let stderr = refused(&hub, &long);
    assert!(
        stderr.contains("metadata.labels") && stderr.contains("63"),
        "{stderr}"
    );

    // Changing an immutable field: 422, and the object keeps it.
    hub.create(DOCS_DEPLOYMENT);
    let out = hub.kubectl(&[
        "patch", "deployment", "nginx-deployment", "--type=merge", "-p",
        r#"{"spec":{"selector":{"matchLabels":{"app":"nginx","tier":"web"}},"template":{"metadata":{"labels":{"tier":"web"}}}}}"#,
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.selector") && stderr.contains("field is immutable"),
        "{stderr}"
    );
    let deployment = hub.json(&["get", "deployment", "nginx-deployment"]);
    assert_eq!(
        deployment["spec"]["selector"],
        serde_json::json!({"matchLabels": {"app": "nginx"}})
    );
    // A Secret's type, and an immutable ConfigMap's data.
    hub.ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "--from-literal=password=hunter2",
    ]);
    let out = hub.kubectl(&[
        "patch",
        "secret",
        "db",
        "--type=merge",
        "-p",
        r#"{"type":"kubernetes.io/basic-auth"}"#,
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("field is immutable"));
    hub.create(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fixed"},"immutable":true,"data":{"k":"v"}}"#);
    let out = hub.kubectl(&[
        "patch",
        "configmap",
        "fixed",
        "--type=merge",
        "-p",
        r#"{"data":{"k":"w"}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("field is immutable when `immutable` is set"),
        "{stderr}"
    );
}

#[test]
fn the_documentation_objects_read_back_with_a_clusters_defaults() {
    let hub = Hub::start();
    hub.create(DOCS_SERVICE);
    let service = hub.json(&["get", "service", "my-service"]);
    let spec = &service["spec"];
    assert_eq!(spec["type"], "ClusterIP", "{service}");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(spec["ipFamilies"], serde_json::json!(["IPv4"]));
    assert_eq!(
        spec["ports"],
        serde_json::json!([{"protocol": "TCP", "port": 80, "targetPort": 9376}])
    );
    assert!(service["metadata"].get("generation").is_none(), "{service}");

    hub.create(DOCS_DEPLOYMENT);
    let deployment = hub.json(&["get", "deployment", "nginx-deployment"]);
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(
        spec["strategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["schedulerName"], "default-scheduler");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["securityContext"], serde_json::json!({}));
    assert_eq!(
        pod["containers"][0],
        serde_json::json!({"name": "nginx", "image": "nginx:1.14.2",
            "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {}, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"})
    );
    assert_eq!(deployment["metadata"]["generation"], 1);

    // A Secret from stringData: data alone, type Opaque.
    hub.create(r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"user":"admin"}}"#);
    let secret = hub.json(&["get", "secret", "s"]);
    assert_eq!(secret["data"], serde_json::json!({"user": "YWRtaW4="}));
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("stringData").is_none(), "{secret}");
}

fn cluster_ip(hub: &Hub, name: &str) -> String {
    let service = hub.json(&["get", "service", name]);
    let ip = service["spec"]["clusterIP"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert_eq!(
        service["spec"]["clusterIPs"],
        serde_json::json!([ip]),
        "{service}"
    );
    ip
}

/// In 10.100.0.0/24, past the network address and the first (the `kubernetes` Service's).
fn in_range(ip: &str) -> bool {
    ip.strip_prefix("10.100.0.")
        .and_then(|last| last.parse::<u8>().ok())
        .is_some_and(|last| (2..255).contains(&last))
}

#[test]
fn services_get_cluster_ips_of_the_service_range() {
    let mut hub = Hub::start_with(&["--service-cidr", "10.100.0.0/24"]);
    hub.ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"]);
    hub.ok(&["create", "service", "nodeport", "edge", "--tcp=443:8443"]);
    let (web, edge) = (cluster_ip(&hub, "web"), cluster_ip(&hub, "edge"));
    assert!(in_range(&web) && in_range(&edge), "{web} {edge}");
    assert_ne!(web, edge);
    let service = hub.json(&["get", "service", "web"]);
    assert_eq!(service["spec"]["ipFamilies"], serde_json::json!(["IPv4"]));
    assert_eq!(service["spec"]["ipFamilyPolicy"], "SingleStack");

    // Asked for: kept when free; refused when taken or outside the range. (An address
    // the random allocation above did not take.)
    let fixed = (50..60)
        .map(|i| format!("10.100.0.{i}"))
        .find(|ip| *ip != web && *ip != edge)
        .unwrap();
    let fixed_flag = format!("--clusterip={fixed}");
    hub.ok(&[
        "create",
        "service",
        "clusterip",
        "fixed",
        "--tcp=80",
        &fixed_flag,
    ]);
    assert_eq!(cluster_ip(&hub, "fixed"), fixed);
    let taken = hub.fails(&[
        "create",
        "service",
        "clusterip",
        "again",
        "--tcp=80",
        &fixed_flag,
    ]);
    assert!(
        taken.contains("spec.clusterIPs[0]") && taken.contains("provided IP is already allocated"),
        "{taken}"
    );
    let outside = hub.fails(&[
        "create",
        "service",
        "clusterip",
        "out",
        "--tcp=80",
        "--clusterip=10.96.0.50",
    ]);
    assert!(outside.contains("is not in the valid range"), "{outside}");
    // Headless stays headless; ExternalName gets none.
    hub.ok(&["create", "service", "clusterip", "db", "--clusterip=None"]);
    assert_eq!(cluster_ip(&hub, "db"), "None");
    hub.ok(&[
        "create",
        "service",
        "externalname",
        "ext",
        "--external-name=db.example.com",
    ]);
    let ext = hub.json(&["get", "service", "ext"]);
    assert!(ext["spec"].get("clusterIP").is_none(), "{ext}");

    // Applied again without the address (client- and server-side): it stays.
    let manifest = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"applied"},
        "spec":{"selector":{"app":"a"},"ports":[{"port":80,"protocol":"TCP"}]}}"#;
    for args in [
        &["apply", "-f", "-"][..],
        &["apply", "--server-side", "-f", "-"][..],
    ] {
        let out = hub.kubectl_with(args, Some(manifest));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let applied = cluster_ip(&hub, "applied");
    let out = hub.kubectl_with(
        &["apply", "--server-side", "-f", "-"],
        Some(&manifest.replace(r#""app":"a""#, r#""app":"b""#)),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cluster_ip(&hub, "applied"), applied);

    // After a restart, a new Service gets none of the addresses held; a deleted Service's
    // address can be had again.
    hub.restart(false);
    let held = [web, edge, fixed.clone(), applied];
    for i in 0..5 {
        let name = format!("after-{i}");
        hub.ok(&["create", "service", "clusterip", &name, "--tcp=80"]);
        let ip = cluster_ip(&hub, &name);
        assert!(in_range(&ip) && !held.contains(&ip), "{ip} {held:?}");
    }
    hub.ok(&["delete", "service", "fixed"]);
    hub.ok(&[
        "create",
        "service",
        "clusterip",
        "again",
        "--tcp=80",
        &fixed_flag,
    ]);
    assert_eq!(cluster_ip(&hub, "again"), fixed);
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn node_port(hub: &Hub, name: &str) -> Option<u64> {
    hub.json(&["get", "service", name])["spec"]["ports"][0]["nodePort"].as_u64()
}

#[test]
fn services_get_node_ports_of_the_node_port_range() {
    let hub = Hub::start_with(&["--service-node-port-range", "31000-31099"]);
    let in_range = |port: Option<u64>| port.is_some_and(|p| (31000..31100).contains(&p));
    hub.ok(&["create", "service", "nodeport", "edge", "--tcp=443:8443"]);
    let edge = node_port(&hub, "edge");
    assert!(in_range(edge), "{edge:?}");

    // Asked for: kept when free; refused when taken or outside the range.
    let create = |name: &str, port: &str| {
        vec![
            "create".to_owned(),
            "service".to_owned(),
            "nodeport".to_owned(),
            name.to_owned(),
            "--tcp=80:8080".to_owned(),
            format!("--node-port={port}"),
        ]
    };
    // (A port the random allocation above did not take.)
    let asked = (31080..31090)
        .find(|p| Some(*p) != edge)
        .unwrap()
        .to_string();
    let fixed = create("fixed", &asked);
    hub.ok(&args(&fixed));
    assert_eq!(
        node_port(&hub, "fixed").map(|p| p.to_string()),
        Some(asked.clone())
    );
    let taken = hub.fails(&args(&create("taken", &asked)));
    assert!(
        taken.contains("spec.ports[0].nodePort")
            && taken.contains("provided port is already allocated"),
        "{taken}"
    );
    let outside = hub.fails(&args(&create("outside", "30080")));
    assert!(
        outside.contains("spec.ports[0].nodePort") && outside.contains("is not in the valid range"),
        "{outside}"
    );

    // Applied again without them: they stay.
    let manifest = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"applied"},
        "spec":{"type":"NodePort","selector":{"app":"a"},"ports":[{"port":80,"protocol":"TCP"}]}}"#;
    let apply = |manifest: &str| {
        let out = hub.kubectl_with(&["apply", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply(manifest);
    let applied = node_port(&hub, "applied");
    assert!(in_range(applied), "{applied:?}");
    apply(&manifest.replace(r#""app":"a""#, r#""app":"b""#));
    assert_eq!(node_port(&hub, "applied"), applied);

    // Changed to ClusterIP: the node port goes, and is free again; so is a deleted
    // Service's.
    hub.ok(&[
        "patch",
        "service",
        "fixed",
        "-p",
        r#"{"spec":{"type":"ClusterIP"}}"#,
    ]);
    assert_eq!(node_port(&hub, "fixed"), None);
    hub.ok(&args(&create("again", &asked)));
    assert_eq!(node_port(&hub, "again").map(|p| p.to_string()), Some(asked));
    hub.ok(&["delete", "service", "edge"]);
    let edge = edge.unwrap().to_string();
    hub.ok(&args(&create("edge2", &edge)));
    assert_eq!(node_port(&hub, "edge2").map(|p| p.to_string()), Some(edge));
}

#[test]
fn jobs_read_back_with_their_generated_selector_and_labels() {
    let hub = Hub::start();
    hub.ok(&[
        "create",
        "job",
        "pi",
        "--image=perl:5.34",
        "--",
        "perl",
        "-e",
        "print 1",
    ]);
    let job = hub.json(&["get", "job", "pi"]);
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        job["spec"]["selector"],
        serde_json::json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"],
        serde_json::json!({"controller-uid": uid, "job-name": "pi",
            "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi"})
    );
    // The generated selector finds the template's labels, as `kubectl get -l` would.
    let selected = hub.ok(&[
        "get",
        "jobs",
        "-l",
        "batch.kubernetes.io/job-name!=x",
        "-o",
        "name",
    ]);
    assert!(selected.contains("job.batch/pi"), "{selected}");
    // A selector chosen without manualSelector: 422.
    let chosen = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"chosen"},
        "spec":{"selector":{"matchLabels":{"app":"c"}},"template":{"metadata":{"labels":{"app":"c"}},
        "spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}}}"#;
    let stderr = refused(&hub, chosen);
    assert!(stderr.contains("`selector` not auto-generated"), "{stderr}");
}
