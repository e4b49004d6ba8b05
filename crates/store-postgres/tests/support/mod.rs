//! What the PostgreSQL store's tests share: a server of their own.

pub mod postgres;
