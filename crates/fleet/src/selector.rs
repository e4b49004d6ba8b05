//! Kubernetes label selectors (`matchLabels` and `matchExpressions`), evaluated against a
//! cluster's labels.

use std::collections::BTreeMap;

/// A Kubernetes label selector: every `matchLabels` pair and every `matchExpressions`
/// requirement must hold (they are ANDed).
///
/// An empty selector matches every set of labels, as in Kubernetes. The domain form of a
/// Kubernetes `LabelSelector` (its operators parsed), made by `TryFrom` in
/// [`model`](crate::model).
///
/// ```
/// use std::collections::BTreeMap;
/// use flotilla_fleet::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
///
/// let selector = LabelSelector {
///     match_labels: BTreeMap::from([("tier".to_string(), "prod".to_string())]),
///     match_expressions: vec![LabelSelectorRequirement {
///         key: "region".into(),
///         operator: LabelSelectorOperator::NotIn,
///         values: vec!["us".into()],
///     }],
/// };
/// let labels = BTreeMap::from([("tier".to_string(), "prod".to_string())]);
/// assert!(selector.matches(&labels)); // no `region` label: NotIn holds
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One requirement of a [`LabelSelector`]: a key, an operator and (for `In`/`NotIn`) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelectorRequirement {
    /// The label key the requirement is about.
    pub key: String,
    /// How the label's value is tested.
    pub operator: LabelSelectorOperator,
    /// The values for `In` and `NotIn`; ignored by `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

/// The operator of a [`LabelSelectorRequirement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelSelectorOperator {
    /// The label is present and its value is one of the values.
    In,
    /// The label is absent, or its value is none of the values.
    NotIn,
    /// The label is present (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy every term of this selector (an empty selector matches all).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelSelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            LabelSelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelSelectorOperator::Exists => value.is_some(),
            LabelSelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: LabelSelectorOperator, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.into(),
                operator,
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let selector = LabelSelector {
            match_labels: labels(&[("tier", "prod"), ("region", "eu")]),
            match_expressions: vec![],
        };
        assert!(selector.matches(&labels(&[("tier", "prod"), ("region", "eu"), ("x", "y")])));
        assert!(!selector.matches(&labels(&[("tier", "prod")])));
        assert!(!selector.matches(&labels(&[("tier", "prod"), ("region", "us")])));
    }

    #[test]
    fn in_needs_the_key_and_one_of_the_values() {
        let selector = requirement("region", LabelSelectorOperator::In, &["eu", "us"]);
        assert!(selector.matches(&labels(&[("region", "eu")])));
        assert!(selector.matches(&labels(&[("region", "us")])));
        assert!(!selector.matches(&labels(&[("region", "ap")])));
        assert!(!selector.matches(&labels(&[])));
    }

    #[test]
    fn not_in_matches_when_the_key_is_absent() {
        let selector = requirement("region", LabelSelectorOperator::NotIn, &["eu"]);
        assert!(selector.matches(&labels(&[])));
        assert!(selector.matches(&labels(&[("region", "us")])));
        assert!(!selector.matches(&labels(&[("region", "eu")])));
    }

    #[test]
    fn exists_and_does_not_exist_ignore_values() {
        let exists = requirement("gpu", LabelSelectorOperator::Exists, &[]);
        let absent = requirement("gpu", LabelSelectorOperator::DoesNotExist, &[]);
        let with = labels(&[("gpu", "")]);
        let without = labels(&[("cpu", "x")]);
        assert!(exists.matches(&with));
        assert!(!exists.matches(&without));
        assert!(!absent.matches(&with));
        assert!(absent.matches(&without));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let mut selector = requirement("region", LabelSelectorOperator::Exists, &[]);
        selector.match_labels = labels(&[("tier", "prod")]);
        assert!(selector.matches(&labels(&[("tier", "prod"), ("region", "eu")])));
        assert!(!selector.matches(&labels(&[("tier", "prod")])));
        assert!(!selector.matches(&labels(&[("region", "eu")])));
    }
}
