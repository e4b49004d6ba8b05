//! How a ServiceAccount appears as a user: `system:serviceaccount:NS:NAME`, in the groups
//! `system:serviceaccounts` and `system:serviceaccounts:NS`.

use crate::registry::object::{NameRule, check_name};

/// What every service account's user name starts with.
pub const USER_PREFIX: &str = "system:serviceaccount:";

/// The group of every service account.
pub const ALL_GROUP: &str = "system:serviceaccounts";

/// The user name of service account `name` in `namespace`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("{USER_PREFIX}{namespace}:{name}")
}

/// The namespace and name of the service account `user` names, if it names one (a valid
/// namespace and a valid account name, as Kubernetes' `SplitUsername` requires).
pub fn split(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(USER_PREFIX)?.split_once(':')?;
    let valid = !name.contains(':')
        && check_name(namespace, NameRule::Label).is_none()
        && check_name(name, NameRule::Subdomain).is_none();
    valid.then_some((namespace, name))
}

/// The groups a service account of `namespace` is in.
pub fn groups(namespace: &str) -> Vec<String> {
    vec![ALL_GROUP.to_owned(), format!("{ALL_GROUP}:{namespace}")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_users_read_back_as_their_namespace_and_name() {
        assert_eq!(username("shop", "ci"), "system:serviceaccount:shop:ci");
        assert_eq!(split("system:serviceaccount:shop:ci"), Some(("shop", "ci")));
        for not_one in [
            "alice",
            "system:serviceaccount:shop",
            "system:serviceaccount:shop:ci:x",
            "system:serviceaccount::ci",
            "system:serviceaccount:Shop:ci",
        ] {
            assert_eq!(split(not_one), None, "{not_one}");
        }
        assert_eq!(
            groups("shop"),
            ["system:serviceaccounts", "system:serviceaccounts:shop"]
        );
    }
}
