//! The key index, in memory: for every key, the versions of it still in the log.
//!
//! The log on disk is ordered by revision only, so a write appends at the end of its
//! B-trees whatever its key; the order by key lives here. It is rebuilt from the log when
//! the store opens, changed only by the writer (after a commit, and by compaction), and
//! read by everyone under a read lock.

use std::collections::BTreeMap;
use std::ops::Bound;

use flotilla_store::{Bytes, Revision, prefix_end};
use smallvec::SmallVec;

/// One row of a key's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub revision: Revision,
    pub create_revision: Revision,
    pub deleted: bool,
}

/// A key at a revision, as a read found it in the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub key: Bytes,
    pub version: Version,
}

/// A key's versions in ascending revision order. Most keys have one (compaction leaves a
/// live key its latest version only), kept in place: a vector of its own would cost an
/// allocation of four versions per key, a third of what the index holds for a key.
type Versions = SmallVec<[Version; 1]>;

#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    /// Versions in ascending revision order; a key has at least one.
    keys: BTreeMap<Bytes, Versions>,
}

impl KeyIndex {
    /// The key's newest version, a tombstone included.
    pub(crate) fn latest(&self, key: &[u8]) -> Option<Version> {
        self.keys.get(key).and_then(|v| v.last().copied())
    }

    /// The key's newest version at or below `at`, if it is live then.
    pub(crate) fn live_at(&self, key: &[u8], at: Revision) -> Option<Version> {
        self.keys.get(key).and_then(|v| live_at(v, at))
    }

    /// Live keys under `prefix` at `at`, strictly after `after`, at most `limit` (0: all);
    /// and whether more follow.
    pub(crate) fn range(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        at: Revision,
        limit: usize,
    ) -> (Vec<Found>, bool) {
        let mut found = Vec::new();
        for (key, versions) in self.scan(prefix, after) {
            let Some(version) = live_at(versions, at) else {
                continue;
            };
            if limit > 0 && found.len() == limit {
                return (found, true);
            }
            found.push(Found {
                key: key.clone(),
                version,
            });
        }
        (found, false)
    }

    /// How many keys under `prefix` are live at `at`.
    pub(crate) fn count(&self, prefix: &[u8], at: Revision) -> u64 {
        self.scan(prefix, None)
            .filter(|(_, versions)| live_at(versions, at).is_some())
            .count() as u64
    }

    /// Adds a key's new version (newer than every version it has).
    pub(crate) fn push(&mut self, key: Bytes, version: Version) {
        self.keys.entry(key).or_default().push(version);
    }

    /// Forgets one version of a key (compaction removed its row).
    pub(crate) fn remove(&mut self, key: &[u8], revision: Revision) {
        if let Some(versions) = self.keys.get_mut(key) {
            versions.retain(|v| v.revision != revision);
            if versions.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// How many keys have a version (live or deleted).
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    fn scan<'a>(
        &'a self,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a Bytes, &'a Versions)> + 'a {
        let lower = match after {
            Some(after) if after >= prefix => Bound::Excluded(Bytes::copy_from_slice(after)),
            _ => Bound::Included(Bytes::copy_from_slice(prefix)),
        };
        let upper = match prefix_end(prefix) {
            Some(end) => Bound::Excluded(Bytes::from(end)),
            None => Bound::Unbounded,
        };
        // An `after` at or past the end of the range leaves nothing (and `range` must not
        // be given an inverted range).
        let empty = match (&lower, &upper) {
            (Bound::Excluded(a) | Bound::Included(a), Bound::Excluded(b)) => a >= b,
            _ => false,
        };
        let range = if empty {
            None
        } else {
            Some(self.keys.range::<Bytes, _>((lower, upper)))
        };
        range.into_iter().flatten()
    }
}

fn live_at(versions: &[Version], at: Revision) -> Option<Version> {
    let newer = versions.partition_point(|v| v.revision <= at);
    let version = versions[..newer].last()?;
    (!version.deleted).then_some(*version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(revision: u64, create: u64, deleted: bool) -> Version {
        Version {
            revision: Revision::new(revision),
            create_revision: Revision::new(create),
            deleted,
        }
    }

    fn index() -> KeyIndex {
        let mut index = KeyIndex::default();
        index.push(Bytes::from_static(b"/a/1"), v(1, 1, false));
        index.push(Bytes::from_static(b"/a/2"), v(2, 2, false));
        index.push(Bytes::from_static(b"/a/1"), v(3, 1, false));
        index.push(Bytes::from_static(b"/a/2"), v(4, 2, true));
        index.push(Bytes::from_static(b"/b"), v(5, 5, false));
        index.push(Bytes::from_static(b"/a/2"), v(6, 6, false));
        index
    }

    fn keys(found: &[Found]) -> Vec<&[u8]> {
        found.iter().map(|f| f.key.as_ref()).collect()
    }

    #[test]
    fn a_key_at_a_revision_is_its_newest_version_up_to_it() {
        let index = index();
        assert_eq!(
            index.live_at(b"/a/1", Revision::new(2)),
            Some(v(1, 1, false))
        );
        assert_eq!(
            index.live_at(b"/a/1", Revision::new(9)),
            Some(v(3, 1, false))
        );
        assert_eq!(index.live_at(b"/a/2", Revision::new(1)), None);
        assert_eq!(
            index.live_at(b"/a/2", Revision::new(5)),
            None,
            "deleted at 4"
        );
        assert_eq!(
            index.live_at(b"/a/2", Revision::new(6)),
            Some(v(6, 6, false))
        );
        assert_eq!(index.latest(b"/a/2"), Some(v(6, 6, false)));
        assert_eq!(index.latest(b"/zz"), None);
    }

    #[test]
    fn ranges_honour_prefix_after_revision_and_limit() {
        let index = index();
        let (found, more) = index.range(b"/a/", None, Revision::new(5), 0);
        assert_eq!((keys(&found), more), (vec![&b"/a/1"[..]], false));
        let (found, more) = index.range(b"/", None, Revision::new(6), 2);
        assert_eq!((keys(&found), more), (vec![&b"/a/1"[..], b"/a/2"], true));
        let (found, more) = index.range(b"/", Some(b"/a/2"), Revision::new(6), 2);
        assert_eq!((keys(&found), more), (vec![&b"/b"[..]], false));
        let (found, _) = index.range(b"/a/", Some(b"/a0"), Revision::new(6), 0);
        assert!(found.is_empty(), "after past the range");
        let (found, _) = index.range(b"/a/", Some(b"/"), Revision::new(6), 0);
        assert_eq!(found.len(), 2, "after before the prefix is no bound");
        assert_eq!(index.count(b"/", Revision::new(6)), 3);
        assert_eq!(index.count(b"", Revision::new(4)), 1);
    }

    #[test]
    fn removing_versions_forgets_keys_left_without_any() {
        let mut index = index();
        index.remove(b"/a/2", Revision::new(2));
        index.remove(b"/a/2", Revision::new(4));
        assert_eq!(
            index.live_at(b"/a/2", Revision::new(6)),
            Some(v(6, 6, false))
        );
        index.remove(b"/b", Revision::new(5));
        assert_eq!(index.len(), 2);
        assert_eq!(index.latest(b"/b"), None);
    }
}
