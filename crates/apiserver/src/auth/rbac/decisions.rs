//! A memo of RBAC decisions: the answer for a question already asked since the index last
//! changed, without visiting bindings and rules again.
//!
//! ```text
//!  authorize(attributes) ─► memo: hash of (cluster, user, groups, verb, group, resource,
//!                                  subresource, namespace, name, path)
//!        hit (same question, compared field by field) ─► the decision
//!        miss ─► Index::allows under the index's read lock ─► remembered, unless the
//!                index changed since the memo was asked (its epoch moved on)
//!  any change of the index (under its write lock) ─► the memo is emptied, epoch + 1
//! ```
//!
//! A request that reads the same objects as the same user over and over (a controller, a
//! CI job, a dashboard) asks the same question each time; with a large policy the answer
//! costs a visit of every binding that names the user or its groups. The memo answers it
//! with one hash and one comparison. It never answers from a policy older than the index:
//! it is emptied under the index's write lock, and a decision made from an index read is
//! kept only if no change came between the memo's miss and its remembering.
//!
//! Only what RBAC decides on is part of the question: the user's name and groups (not its
//! uid or extra), and the request's attributes; the path only for a request that is not
//! for objects. The memo holds at most [`CAPACITY`] questions; a full memo starts over.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{PoisonError, RwLock};

use smallvec::SmallVec;

use crate::auth::Attributes;

/// The most questions remembered at once.
pub(crate) const CAPACITY: usize = 16_384;

/// A question as remembered: what [`Attributes`] holds that RBAC decides on.
#[derive(Debug)]
struct Question {
    cluster: Box<str>,
    user: Box<str>,
    groups: Box<[Box<str>]>,
    verb: Box<str>,
    resource_request: bool,
    group: Box<str>,
    resource: Box<str>,
    subresource: Box<str>,
    namespace: Box<str>,
    name: Box<str>,
    path: Box<str>,
}

impl Question {
    fn of(a: &Attributes<'_>) -> Self {
        Question {
            cluster: a.cluster.into(),
            user: a.user.name.as_str().into(),
            groups: a.user.groups.iter().map(|g| g.as_str().into()).collect(),
            verb: a.verb.into(),
            resource_request: a.resource_request,
            group: a.group.into(),
            resource: a.resource.into(),
            subresource: a.subresource.into(),
            namespace: a.namespace.into(),
            name: a.name.into(),
            path: path_of(a).into(),
        }
    }

    fn is(&self, a: &Attributes<'_>) -> bool {
        *self.cluster == *a.cluster
            && *self.user == *a.user.name
            && self.groups.len() == a.user.groups.len()
            && self
                .groups
                .iter()
                .zip(&a.user.groups)
                .all(|(x, y)| **x == **y)
            && *self.verb == *a.verb
            && self.resource_request == a.resource_request
            && *self.group == *a.group
            && *self.resource == *a.resource
            && *self.subresource == *a.subresource
            && *self.namespace == *a.namespace
            && *self.name == *a.name
            && *self.path == *path_of(a)
    }
}

/// The path as RBAC sees it: only a request that is not for objects is decided by it.
fn path_of<'a>(a: &Attributes<'a>) -> &'a str {
    if a.resource_request { "" } else { a.path }
}

#[derive(Debug, Default)]
struct Memo {
    /// How many times the index has changed.
    epoch: u64,
    /// Questions by their hash (questions of one hash are told apart field by field).
    questions: HashMap<u64, SmallVec<[(Question, bool); 1]>>,
    len: usize,
}

/// What [`Decisions::recall`] found.
pub(crate) struct Recalled {
    hash: u64,
    epoch: u64,
    /// The decision remembered, if any.
    pub(crate) allowed: Option<bool>,
}

/// The memo of decisions of one RBAC index.
#[derive(Debug, Default)]
pub(crate) struct Decisions {
    /// Read-locked to recall: requests of many clients find their decisions side by side.
    memo: RwLock<Memo>,
    hasher: RandomState,
}

impl Decisions {
    fn hash(&self, a: &Attributes<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        a.cluster.hash(&mut h);
        a.user.name.hash(&mut h);
        a.user.groups.hash(&mut h);
        a.verb.hash(&mut h);
        a.resource_request.hash(&mut h);
        a.group.hash(&mut h);
        a.resource.hash(&mut h);
        a.subresource.hash(&mut h);
        a.namespace.hash(&mut h);
        a.name.hash(&mut h);
        path_of(a).hash(&mut h);
        h.finish()
    }

    /// The decision remembered for `a`, if any, and what [`Decisions::remember`] needs.
    pub(crate) fn recall(&self, a: &Attributes<'_>) -> Recalled {
        let hash = self.hash(a);
        let memo = self.memo.read().unwrap_or_else(PoisonError::into_inner);
        let allowed = memo
            .questions
            .get(&hash)
            .and_then(|found| found.iter().find(|(q, _)| q.is(a)))
            .map(|(_, allowed)| *allowed);
        Recalled {
            hash,
            epoch: memo.epoch,
            allowed,
        }
    }

    /// Remembers that `a` was decided `allowed` from an index read after `recalled` — unless
    /// the index changed since.
    pub(crate) fn remember(&self, recalled: &Recalled, a: &Attributes<'_>, allowed: bool) {
        let mut memo = self.memo.write().unwrap_or_else(PoisonError::into_inner);
        if memo.epoch != recalled.epoch {
            return;
        }
        if memo.len >= CAPACITY {
            memo.questions.clear();
            memo.len = 0;
        }
        let found = memo.questions.entry(recalled.hash).or_default();
        if !found.iter().any(|(q, _)| q.is(a)) {
            found.push((Question::of(a), allowed));
            memo.len += 1;
        }
    }

    /// Forgets every decision: the index changed. Called under the index's write lock.
    pub(crate) fn forget(&self) {
        let mut memo = self.memo.write().unwrap_or_else(PoisonError::into_inner);
        memo.epoch += 1;
        memo.questions.clear();
        memo.len = 0;
    }

    /// How many decisions are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.memo.read().unwrap_or_else(PoisonError::into_inner).len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    fn asks<'a>(user: &'a UserInfo, verb: &'a str, name: &'a str) -> Attributes<'a> {
        Attributes {
            cluster: "root",
            user,
            verb,
            resource_request: true,
            group: "",
            version: "v1",
            resource: "configmaps",
            subresource: "",
            namespace: "shop",
            name,
            path: "/api/v1/namespaces/shop/configmaps",
        }
    }

    #[test]
    fn a_decision_is_recalled_only_for_the_same_question() {
        let decisions = Decisions::default();
        let alice = UserInfo::new("alice", &["team-a"]);
        let get = asks(&alice, "get", "web");
        let recalled = decisions.recall(&get);
        assert_eq!(recalled.allowed, None);
        decisions.remember(&recalled, &get, true);
        assert_eq!(decisions.recall(&get).allowed, Some(true));

        // Another name, verb, user or group set is another question.
        assert_eq!(decisions.recall(&asks(&alice, "get", "db")).allowed, None);
        assert_eq!(
            decisions.recall(&asks(&alice, "delete", "web")).allowed,
            None
        );
        let bob = UserInfo::new("bob", &["team-a"]);
        assert_eq!(decisions.recall(&asks(&bob, "get", "web")).allowed, None);
        let alice_elsewhere = UserInfo::new("alice", &["team-b"]);
        let other = asks(&alice_elsewhere, "get", "web");
        assert_eq!(decisions.recall(&other).allowed, None);
        let recalled = decisions.recall(&other);
        decisions.remember(&recalled, &other, false);
        assert_eq!(decisions.recall(&other).allowed, Some(false));
        assert_eq!(decisions.recall(&get).allowed, Some(true));

        // A request for a path is decided by its path; one for objects is not.
        let mut discovery = asks(&alice, "get", "");
        discovery.resource_request = false;
        discovery.path = "/apis";
        let recalled = decisions.recall(&discovery);
        decisions.remember(&recalled, &discovery, true);
        discovery.path = "/metrics";
        assert_eq!(decisions.recall(&discovery).allowed, None);
        let mut get_elsewhere = asks(&alice, "get", "web");
        get_elsewhere.path = "/api/v1/namespaces/shop/configmaps/web";
        assert_eq!(decisions.recall(&get_elsewhere).allowed, Some(true));
        assert_eq!(decisions.len(), 3);
    }

    #[test]
    fn a_change_of_the_index_forgets_and_a_decision_made_before_it_is_not_kept() {
        let decisions = Decisions::default();
        let alice = UserInfo::new("alice", &[]);
        let get = asks(&alice, "get", "web");
        let recalled = decisions.recall(&get);
        decisions.remember(&recalled, &get, true);
        decisions.forget();
        assert_eq!(decisions.recall(&get).allowed, None);

        // Asked before a change, decided from the index before it, remembered after it:
        // not kept, as the decision may be the old policy's.
        let before = decisions.recall(&get);
        decisions.forget();
        decisions.remember(&before, &get, true);
        assert_eq!(decisions.recall(&get).allowed, None);
        assert_eq!(decisions.len(), 0);
    }

    #[test]
    fn a_full_memo_starts_over() {
        let decisions = Decisions::default();
        let alice = UserInfo::new("alice", &[]);
        let names: Vec<String> = (0..=CAPACITY).map(|i| format!("cm-{i}")).collect();
        for name in &names {
            let get = asks(&alice, "get", name);
            let recalled = decisions.recall(&get);
            decisions.remember(&recalled, &get, true);
        }
        assert_eq!(decisions.len(), 1, "the last one, in a memo started over");
        let last = asks(&alice, "get", &names[CAPACITY]);
        assert_eq!(decisions.recall(&last).allowed, Some(true));
        assert_eq!(decisions.recall(&asks(&alice, "get", "cm-0")).allowed, None);
    }
}
