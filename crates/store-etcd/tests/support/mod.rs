//! What the etcd store's tests share: a server of their own.

pub mod etcd;
