//! A member that comes back is served at once: a simulator killed (SIGKILL) while the hub
//! changes a template, then started again on its data, gets the change within 30 s of its
//! restart, not at the next resync (five minutes by default). The real hub, simulator and
//! kubectl.

mod support;

use std::time::Duration;

use support::{
    EU_WEB, Hub, Sim, condition, eventually_within, image, join_labelled, member_web, signal,
};

/// [`support::eventually_within`], polling every 150 ms.
fn eventually<T>(what: &str, within: Duration, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_within(what, within, Duration::from_millis(150), probe)
}

/// The image of member `cluster`'s Deployment shop/web, if it has one.
fn member_image(sim: &Sim, cluster: &str) -> Result<String, String> {
    member_web(sim, cluster).map(|web| image(&web).to_owned())
}

#[test]
fn a_member_killed_during_a_change_gets_it_within_30_s_of_its_restart() {
    // The default resync period (5 minutes): recovery must not wait for it.
    let hub = Hub::start_with(&["--health-period", "1s"]);
    let mut sim = Sim::start(&["--clusters", "2", "--ready-delay", "100ms"]);
    join_labelled(&hub, &sim, "member-1", "region=eu");
    join_labelled(&hub, &sim, "member-2", "region=eu");
    hub.create(EU_WEB);
    for cluster in ["member-1", "member-2"] {
        eventually(
            &format!("{cluster} runs nginx:1.27"),
            Duration::from_secs(120),
            || match member_image(&sim, cluster)? {
                image if image == "nginx:1.27" => Ok(()),
                image => Err(image),
            },
        );
    }

    // The simulator dies at once (no goodbye), and the template changes meanwhile.
    signal(sim.pid(), "KILL");
    hub.ok(&["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.28"]);
    // The hub tried the new generation and failed: each Work says so.
    for cluster in ["member-1", "member-2"] {
        let namespace = format!("flotilla-cluster-{cluster}");
        eventually(
            &format!("{cluster}'s Work fails to apply"),
            Duration::from_secs(120),
            || {
                let work = hub.json(&["get", "work", "shop.web", "-n", &namespace]);
                let tried = work["status"]["observedGeneration"] == work["metadata"]["generation"];
                let failed = condition(&work, "Applied").is_some_and(|c| c["status"] == "False");
                (tried && failed)
                    .then_some(())
                    .ok_or_else(|| work["status"].to_string())
            },
        );
    }

    // Back on the same data and port: within 30 s every member runs the new image.
    sim.restart();
    eventually(
        "every member runs nginx:1.28 after the restart",
        Duration::from_secs(30),
        || {
            for cluster in ["member-1", "member-2"] {
                let image = member_image(&sim, cluster)?;
                if image != "nginx:1.28" {
                    return Err(format!("{cluster}: {image}"));
                }
            }
            Ok(())
        },
    );
    // And the hub says so.
    eventually(
        "the Works are applied again",
        Duration::from_secs(30),
        || {
            for cluster in ["member-1", "member-2"] {
                let namespace = format!("flotilla-cluster-{cluster}");
                let work = hub.json(&["get", "work", "shop.web", "-n", &namespace]);
                if !condition(&work, "Applied").is_some_and(|c| c["status"] == "True") {
                    return Err(work["status"].to_string());
                }
            }
            Ok(())
        },
    );
}
