//! A memo of RBAC decisions: the answer for a question already asked since the index last
//! changed, without visiting bindings and rules again.
//!
//! ```text
//!  authorize(attributes) ─► memo: hash of (cluster, user, groups, verb, group, resource,
//!                                  subresource, namespace, name, path)
//!        hit (same question: its fields written out in a row, compared at once) ─► the decision
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
use std::hash::{BuildHasher, RandomState};
use std::sync::{PoisonError, RwLock};

use smallvec::SmallVec;

use crate::auth::Attributes;

/// The most questions remembered at once.
pub(crate) const CAPACITY: usize = 16_384;

/// A question as remembered: what [`Attributes`] holds that RBAC decides on, written out
/// as one run of bytes ([`write`]), so that it is hashed in one pass and told
/// apart from another by one comparison of memory that sits together.
type Question = Box<[u8]>;

/// Ends each field of a question's bytes; it never occurs in UTF-8.
const FIELD_END: u8 = 0xff;
/// Ends each of the user's groups; it never occurs in UTF-8 either.
const GROUP_END: u8 = 0xfe;

/// `a` as a question's bytes: the fields RBAC decides on, in a fixed order, each ended by
/// a byte no string holds, so that two questions have the same bytes only when they are
/// the same question. One allocation of the exact length, then copies.
fn write(a: &Attributes<'_>) -> Vec<u8> {
    let fields = [
        a.cluster,
        &a.user.name,
        a.verb,
        if a.resource_request { "r" } else { "p" },
        a.group,
        a.resource,
        a.subresource,
        a.namespace,
        a.name,
        path_of(a),
    ];
    let groups = &a.user.groups;
    let len = fields.iter().map(|f| f.len() + 1).sum::<usize>()
        + groups.iter().map(|g| g.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    for field in fields {
        out.extend_from_slice(field.as_bytes());
        out.push(FIELD_END);
    }
    for group in groups {
        out.extend_from_slice(group.as_bytes());
        out.push(GROUP_END);
    }
    out
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
    question: Vec<u8>,
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
    /// The decision remembered for `a`, if any, and what [`Decisions::remember`] needs.
    pub(crate) fn recall(&self, a: &Attributes<'_>) -> Recalled {
        let question = write(a);
        let hash = self.hasher.hash_one(&question[..]);
        let memo = self.memo.read().unwrap_or_else(PoisonError::into_inner);
        let allowed = memo
            .questions
            .get(&hash)
            .and_then(|found| found.iter().find(|(q, _)| **q == question[..]))
            .map(|(_, allowed)| *allowed);
        Recalled {
            hash,
            epoch: memo.epoch,
            question,
            allowed,
        }
    }

    /// Remembers that `a` was decided `allowed` from an index read after `recalled` — unless
    /// the index changed since.
    pub(crate) fn remember(&self, recalled: Recalled, allowed: bool) {
        let mut memo = self.memo.write().unwrap_or_else(PoisonError::into_inner);
        if memo.epoch != recalled.epoch {
            return;
        }
        if memo.len >= CAPACITY {
            memo.questions.clear();
            memo.len = 0;
        }
        let found = memo.questions.entry(recalled.hash).or_default();
        if !found.iter().any(|(q, _)| **q == recalled.question[..]) {
            found.push((recalled.question.into_boxed_slice(), allowed));
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
        decisions.remember(recalled, true);
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
        decisions.remember(recalled, false);
        assert_eq!(decisions.recall(&other).allowed, Some(false));
        assert_eq!(decisions.recall(&get).allowed, Some(true));

        // A request for a path is decided by its path; one for objects is not.
        let mut discovery = asks(&alice, "get", "");
        discovery.resource_request = false;
        discovery.path = "/apis";
        let recalled = decisions.recall(&discovery);
        decisions.remember(recalled, true);
        discovery.path = "/metrics";
        assert_eq!(decisions.recall(&discovery).allowed, None);
        let mut get_elsewhere = asks(&alice, "get", "web");
        get_elsewhere.path = "/api/v1/namespaces/shop/configmaps/web";
        assert_eq!(decisions.recall(&get_elsewhere).allowed, Some(true));
        assert_eq!(decisions.len(), 3);
    }

    #[test]
    fn questions_whose_fields_run_together_alike_are_told_apart() {
        let decisions = Decisions::default();
        let two = UserInfo::new("alice", &["a", "b"]);
        let one = UserInfo::new("alice", &["ab"]);
        let none = UserInfo::new("alice", &[]);
        let mut get = asks(&two, "get", "web");
        let recalled = decisions.recall(&get);
        decisions.remember(recalled, true);
        // The same characters in another split between groups, or between fields.
        assert_eq!(decisions.recall(&asks(&one, "get", "web")).allowed, None);
        assert_eq!(decisions.recall(&asks(&none, "get", "web")).allowed, None);
        get.namespace = "shopw";
        get.name = "eb";
        assert_eq!(decisions.recall(&get).allowed, None);
        get.namespace = "shop";
        get.name = "web";
        get.resource_request = false;
        assert_eq!(decisions.recall(&get).allowed, None);
        get.resource_request = true;
        assert_eq!(decisions.recall(&get).allowed, Some(true));
    }

    #[test]
    fn a_change_of_the_index_forgets_and_a_decision_made_before_it_is_not_kept() {
        let decisions = Decisions::default();
        let alice = UserInfo::new("alice", &[]);
        let get = asks(&alice, "get", "web");
        let recalled = decisions.recall(&get);
        decisions.remember(recalled, true);
        decisions.forget();
        assert_eq!(decisions.recall(&get).allowed, None);

        // Asked before a change, decided from the index before it, remembered after it:
        // not kept, as the decision may be the old policy's.
        let before = decisions.recall(&get);
        decisions.forget();
        decisions.remember(before, true);
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
            decisions.remember(recalled, true);
        }
        assert_eq!(decisions.len(), 1, "the last one, in a memo started over");
        let last = asks(&alice, "get", &names[CAPACITY]);
        assert_eq!(decisions.recall(&last).allowed, Some(true));
        assert_eq!(decisions.recall(&asks(&alice, "get", "cm-0")).allowed, None);
    }
}
