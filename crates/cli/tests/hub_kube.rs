//! kube-rs, unmodified, against a real `flotilla hub` process: watchers across a forced
//! relist and across restarts, a Controller reconciling a custom resource, the finalizer
//! helper.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event as Finalizer, finalizer};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::Hub;

async fn client(hub: &Hub) -> Client {
    let kubeconfig = Kubeconfig::read_from(hub.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn configmap(name: &str, n: u32) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "data": {"n": n.to_string()},
    }))
    .unwrap()
}

/// What a watcher shows, rebuilt from its events, with the checks on their order.
#[derive(Default)]
struct View {
    objects: BTreeMap<String, String>,
    relisting: Option<BTreeMap<String, String>>,
    /// The resourceVersion of the last change seen since the last (re)list.
    last: u64,
    /// How many times the watcher (re)listed.
    lists: usize,
    /// 410 Expired errors the watcher reported.
    expired: usize,
}

fn rv(cm: &ConfigMap) -> u64 {
    cm.resource_version().unwrap().parse().unwrap()
}

fn n(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("n"))
        .cloned()
        .unwrap_or_default()
}

impl View {
    fn apply(&mut self, item: Result<Event<ConfigMap>, watcher::Error>) {
        match item {
            Ok(Event::Init) => {
                self.lists += 1;
                self.relisting = Some(BTreeMap::new());
                self.last = 0;
            }
            Ok(Event::InitApply(cm)) => {
                self.last = self.last.max(rv(&cm));
                self.relisting
                    .as_mut()
                    .expect("InitApply inside a list")
                    .insert(cm.name_any(), n(&cm));
            }
            Ok(Event::InitDone) => {
                self.objects = self.relisting.take().expect("InitDone after Init")
            }
            Ok(Event::Apply(cm)) => {
                assert!(
                    rv(&cm) > self.last,
                    "change {} after {}",
                    rv(&cm),
                    self.last
                );
                self.last = rv(&cm);
                self.objects.insert(cm.name_any(), n(&cm));
            }
            Ok(Event::Delete(cm)) => {
                assert!(
                    rv(&cm) > self.last,
                    "deletion {} after {}",
                    rv(&cm),
                    self.last
                );
                self.last = rv(&cm);
                assert!(
                    self.objects.remove(&cm.name_any()).is_some(),
                    "deleted an unseen object"
                );
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => self.expired += 1,
            Err(_) => {}
        }
    }

    /// Follows the watcher until its view equals `model`.
    async fn until<S>(&mut self, stream: &mut S, model: &BTreeMap<String, String>)
    where
        S: Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.relisting.is_some() || self.objects != *model {
            let item = tokio::time::timeout_at(deadline, stream.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the watcher did not converge: {:?} vs {model:?}",
                        self.objects
                    )
                })
                .expect("the watcher ended");
            self.apply(item);
        }
    }
}

async fn write(api: &Api<ConfigMap>, model: &mut BTreeMap<String, String>, name: &str, n: u32) {
    let cm = configmap(name, n);
    if model.contains_key(name) {
        api.replace(name, &PostParams::default(), &cm)
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    model.insert(name.to_owned(), n.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_every_change_in_order_across_a_forced_relist() {
    let hub = Hub::start_with(&["--compaction-interval=1s"]);
    let api: Api<ConfigMap> = Api::namespaced(client(&hub).await, "default");
    // The server ends each watch after a second; the watcher then resumes from its
    // resourceVersion, or relists if that was compacted.
    let mut stream = watcher(api.clone(), watcher::Config::default().timeout(1))
        .default_backoff()
        .boxed();
    let mut view = View::default();
    let mut model = BTreeMap::new();
    for i in 0..20 {
        write(&api, &mut model, &format!("cm-{i:02}"), 0).await;
    }
    view.until(&mut stream, &model).await;
    assert_eq!(view.lists, 1);

    // Not reading the watcher while changes happen and compaction passes its position.
    for round in 1..=3 {
        for i in 0..20 {
            write(&api, &mut model, &format!("cm-{i:02}"), round).await;
        }
    }
    for i in 0..5 {
        let name = format!("cm-{i:02}");
        api.delete(&name, &DeleteParams::default()).await.unwrap();
        model.remove(&name);
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    write(&api, &mut model, "cm-late", 9).await;

    view.until(&mut stream, &model).await;
    assert!(
        view.expired >= 1,
        "the watcher was told its resourceVersion expired"
    );
    assert!(view.lists >= 2, "the watcher relisted");
    // And it keeps following changes after the relist.
    write(&api, &mut model, "cm-10", 42).await;
    view.until(&mut stream, &model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_follows_the_hub_across_restarts() {
    let mut hub = Hub::start();
    let api: Api<ConfigMap> = Api::namespaced(client(&hub).await, "default");
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut view = View::default();
    let mut model = BTreeMap::new();
    for i in 0..10 {
        write(&api, &mut model, &format!("cm-{i}"), 0).await;
    }
    view.until(&mut stream, &model).await;
    for (round, kill) in [(1, false), (2, true)] {
        tokio::task::block_in_place(|| hub.restart(kill));
        for i in 0..10 {
            write(&api, &mut model, &format!("cm-{i}"), round).await;
        }
        write(&api, &mut model, &format!("new-{round}"), round).await;
        view.until(&mut stream, &model).await;
    }
    // It resumed from its resourceVersion each time: no relist was needed.
    assert_eq!(view.lists, 1);
    assert_eq!(view.expired, 0);
}

/// A greeting: the controller writes a ConfigMap saying hello, and its status.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus"
)]
struct GreetingSpec {
    name: String,
}

/// What the controller reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
struct GreetingStatus {
    message: String,
}

const FINALIZER: &str = "example.com/cleanup";

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(
    greeting: Arc<Greeting>,
    client: Arc<Client>,
) -> Result<Action, finalizer::Error<ReconcileError>> {
    let namespace = greeting.namespace().unwrap();
    let greetings: Api<Greeting> = Api::namespaced((*client).clone(), &namespace);
    let configmaps: Api<ConfigMap> = Api::namespaced((*client).clone(), &namespace);
    finalizer(&greetings, FINALIZER, greeting, |event| async {
        match event {
            Finalizer::Apply(greeting) => {
                let message = format!("hello, {}", greeting.spec.name);
                // Server-side apply comes with the next issue: create, or merge meanwhile.
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("greeting-{}", greeting.name_any())},
                    "data": {"message": message}}))
                .unwrap();
                match configmaps.create(&PostParams::default(), &cm).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        configmaps
                            .patch(&cm.name_any(), &PatchParams::default(), &Patch::Merge(&cm))
                            .await?;
                    }
                    Err(e) => return Err(e.into()),
                }
                let status = serde_json::json!({"status": {"message": message}});
                greetings
                    .patch_status(
                        &greeting.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(greeting) => {
                match configmaps
                    .delete(
                        &format!("greeting-{}", greeting.name_any()),
                        &DeleteParams::default(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                Ok(Action::await_change())
            }
        }
    })
    .await
}

fn error_policy(_: Arc<Greeting>, _: &finalizer::Error<ReconcileError>, _: Arc<Client>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

/// Polls `check` until it returns something.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_reconciles_a_custom_resource_with_a_finalizer() {
    let hub = Hub::start();
    let client = client(&hub).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Greeting::crd())
        .await
        .unwrap();
    eventually("the CRD to be established", || async {
        let crd = crds.get("greetings.example.com").await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;

    let greetings: Api<Greeting> = Api::namespaced(client.clone(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let controller = Controller::new(greetings.clone(), watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(client.clone()))
        .for_each(|_| async {});
    let controller = tokio::spawn(controller);

    let greeting = Greeting::new(
        "world",
        GreetingSpec {
            name: "world".into(),
        },
    );
    greetings
        .create(&PostParams::default(), &greeting)
        .await
        .unwrap();
    let message = eventually("the ConfigMap", || async {
        let cm = configmaps.get_opt("greeting-world").await.unwrap()?;
        cm.data?.get("message").cloned()
    })
    .await;
    assert_eq!(message, "hello, world");
    let reconciled = eventually("the status", || async {
        let g = greetings.get("world").await.unwrap();
        g.status.clone().map(|_| g)
    })
    .await;
    assert_eq!(reconciled.status.unwrap().message, "hello, world");
    assert_eq!(
        reconciled.metadata.finalizers,
        Some(vec![FINALIZER.to_owned()])
    );

    // A change of the spec is reconciled too.
    let patch = serde_json::json!({"spec": {"name": "flotilla"}});
    greetings
        .patch("world", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the new message", || async {
        let cm = configmaps.get_opt("greeting-world").await.unwrap()?;
        (cm.data?.get("message")? == "hello, flotilla").then_some(())
    })
    .await;

    // Deleting runs the cleanup, then the finalizer goes and so does the object.
    greetings
        .delete("world", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the cleanup", || async {
        let cm_gone = configmaps
            .get_opt("greeting-world")
            .await
            .unwrap()
            .is_none();
        let greeting_gone = greetings.get_opt("world").await.unwrap().is_none();
        (cm_gone && greeting_gone).then_some(())
    })
    .await;
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_works_in_a_logical_cluster() {
    let hub = Hub::start();
    hub.create(r#"{"apiVersion":"tenancy.flotilla.io/v1alpha1","kind":"LogicalCluster","metadata":{"name":"team-a"}}"#);
    let kubeconfig = Kubeconfig::read_from(hub.cluster_kubeconfig("team-a")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let team: Api<ConfigMap> = Api::namespaced(Client::try_from(config).unwrap(), "default");
    let root: Api<ConfigMap> = Api::namespaced(client(&hub).await, "default");
    team.create(&PostParams::default(), &configmap("mine", 1))
        .await
        .unwrap();
    let names: Vec<String> = team
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names, ["mine"]);
    assert!(root.get_opt("mine").await.unwrap().is_none());
    // A watcher in the logical cluster sees its changes only.
    let mut stream = watcher(team.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut view = View::default();
    let mut model = BTreeMap::from([("mine".to_owned(), "1".to_owned())]);
    view.until(&mut stream, &model).await;
    root.create(&PostParams::default(), &configmap("rooted", 1))
        .await
        .unwrap();
    write(&team, &mut model, "second", 2).await;
    view.until(&mut stream, &model).await;
    assert!(!view.objects.contains_key("rooted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_through_kube_rs() {
    let hub = Hub::start();
    let api: Api<ConfigMap> = Api::namespaced(client(&hub).await, "default");
    let config = |data: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": data,
        })
    };
    let mine = PatchParams::apply("flotilla");
    // Apply creates, then a re-apply of the same configuration is a no-op.
    let created = api
        .patch(
            "settings",
            &mine,
            &Patch::Apply(config(serde_json::json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    let again = api
        .patch(
            "settings",
            &mine,
            &Patch::Apply(config(serde_json::json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), created.resource_version());
    let managed = again.managed_fields();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("flotilla"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));

    // Another manager changing a field it does not own conflicts (409), then forces.
    let theirs = PatchParams::apply("someone-else");
    let conflict = api
        .patch(
            "settings",
            &theirs,
            &Patch::Apply(config(serde_json::json!({"a": "9"}))),
        )
        .await
        .unwrap_err();
    match conflict {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert!(
                status.message.contains("conflict with \"flotilla\""),
                "{}",
                status.message
            );
            assert!(status.message.contains(".data.a"), "{}", status.message);
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let forced = api
        .patch(
            "settings",
            &theirs.clone().force(),
            &Patch::Apply(config(serde_json::json!({"a": "9"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["a"], "9");

    // The first manager drops "b": nobody else owns it, so it goes; "a" is someone else's.
    let trimmed = api
        .patch(
            "settings",
            &mine,
            &Patch::Apply(config(serde_json::json!({}))),
        )
        .await
        .unwrap();
    let data = trimmed.data.unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["a"]);
}
