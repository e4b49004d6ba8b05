//! Amounts of CPU, memory and pods: Kubernetes quantities read as integers, what a node
//! offers and what one pod of a template asks for.

use flotilla_api::quantity::Amount;
use serde_json::Value;

/// Amounts of the resources the simulator schedules by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Pods.
    pub pods: u64,
}

/// A non-negative Kubernetes quantity (`"500m"`, `"2"`, `"1.5Gi"`, `"1e3"`) in thousandths of
/// its unit, rounded up; `None` if `text` is not one, is negative or is too large.
///
/// ```
/// use flotilla_sim::resources::milli;
///
/// assert_eq!(milli("250m"), Some(250));
/// assert_eq!(milli("2"), Some(2000));
/// assert_eq!(milli("1Ki"), Some(1_024_000));
/// assert_eq!(milli("-1"), None);
/// ```
pub fn milli(text: &str) -> Option<u128> {
    if text.starts_with('-') {
        return None;
    }
    u128::try_from(Amount::parse(text)?.millis()?).ok()
}

/// A quantity as a whole number of units, rounded up (bytes of memory, pods).
fn units(text: &str) -> Option<u64> {
    milli(text).and_then(|m| u64::try_from(m.div_ceil(1000)).ok())
}

/// A quantity in thousandths (millicores of CPU).
fn thousandths(text: &str) -> Option<u64> {
    milli(text).and_then(|m| u64::try_from(m).ok())
}

impl Resources {
    /// One pod and nothing else.
    pub const ONE_POD: Resources = Resources {
        cpu_millis: 0,
        memory_bytes: 0,
        pods: 1,
    };

    /// A resource list as nodes and containers give them (`{"cpu": "8", "memory": "32Gi",
    /// "pods": "110"}`); a missing or unreadable amount counts as zero.
    pub fn from_list(list: &Value) -> Self {
        let amount = |name: &str, read: fn(&str) -> Option<u64>| {
            match &list[name] {
                Value::String(text) => read(text),
                Value::Number(n) => n.as_u64().map(|n| n.to_string()).and_then(|t| read(&t)),
                _ => None,
            }
            .unwrap_or(0)
        };
        Resources {
            cpu_millis: amount("cpu", thousandths),
            memory_bytes: amount("memory", units),
            pods: amount("pods", units),
        }
    }

    /// What one pod of a pod template (`spec.template`) asks for: its containers' requests
    /// summed (a request not given is its limit, as Kubernetes defaults it), or the largest
    /// init container's if that is more; and one pod.
    pub fn of_pod(template: &Value) -> Self {
        let requests = |container: &Value| {
            let resources = &container["resources"];
            let mut list = resources["limits"].as_object().cloned().unwrap_or_default();
            list.extend(
                resources["requests"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
            Resources::from_list(&Value::Object(list))
        };
        let spec = &template["spec"];
        let containers = spec["containers"].as_array().into_iter().flatten();
        let running = containers.fold(Resources::default(), |sum, c| sum.plus(requests(c)));
        let init = spec["initContainers"].as_array().into_iter().flatten();
        let starting = init.fold(Resources::default(), |max, c| max.max(requests(c)));
        Resources {
            pods: 1,
            ..running.max(starting)
        }
    }

    /// The sum of two amounts.
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            pods: self.pods.saturating_add(other.pods),
        }
    }

    /// The larger of each amount.
    fn max(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            pods: self.pods.max(other.pods),
        }
    }

    /// How many pods asking for `each` fit in these free amounts, at most `wanted`.
    pub fn room_for(self, each: Resources, wanted: u64) -> u64 {
        let limit = |free: u64, need: u64| free.checked_div(need).unwrap_or(u64::MAX);
        wanted
            .min(limit(self.cpu_millis, each.cpu_millis))
            .min(limit(self.memory_bytes, each.memory_bytes))
            .min(limit(self.pods, each.pods))
    }

    /// These amounts less `count` pods asking for `each` (never below zero).
    pub fn minus(self, each: Resources, count: u64) -> Resources {
        Resources {
            cpu_millis: self
                .cpu_millis
                .saturating_sub(each.cpu_millis.saturating_mul(count)),
            memory_bytes: self
                .memory_bytes
                .saturating_sub(each.memory_bytes.saturating_mul(count)),
            pods: self.pods.saturating_sub(each.pods.saturating_mul(count)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_in_millis_refuse_negatives() {
        // Parsing itself is tested in flotilla_api::quantity; here only what `milli` adds.
        assert_eq!(milli("1"), Some(1000));
        assert_eq!(milli("2Gi"), Some(2 * 1024 * 1024 * 1024 * 1000));
        for bad in ["-1", "-1n", "1x", "1e99"] {
            assert_eq!(milli(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pod_asks_for_its_containers_requests_or_limits() {
        let template = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"memory": "128Mi"}}},
                {"name": "c"},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        }});
        assert_eq!(
            Resources::of_pod(&template),
            Resources {
                cpu_millis: 2000,
                memory_bytes: 192 << 20,
                pods: 1
            }
        );
        assert_eq!(Resources::of_pod(&json!({})), Resources::ONE_POD);
    }

    #[test]
    fn room_is_bounded_by_every_resource() {
        let free = Resources::from_list(&json!({"cpu": "4", "memory": "1Gi", "pods": 10}));
        assert_eq!(free.pods, 10);
        let each = Resources {
            cpu_millis: 1500,
            memory_bytes: 100 << 20,
            pods: 1,
        };
        assert_eq!(free.room_for(each, 100), 2);
        assert_eq!(free.room_for(each, 1), 1);
        assert_eq!(free.room_for(Resources::ONE_POD, 100), 10);
        let left = free.minus(each, 2);
        assert_eq!(left.cpu_millis, 1000);
        assert_eq!(left.room_for(each, 100), 0);
        assert_eq!(Resources::default().room_for(Resources::default(), 7), 7);
    }
}
