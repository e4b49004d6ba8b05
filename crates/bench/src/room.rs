//! A run's own room on a database server: a database on PostgreSQL, a key prefix on etcd,
//! so that scenarios running hubs on a shared server (failover, propagation) neither see
//! an earlier run's objects nor leave theirs behind.
//!
//! ```text
//!  postgres://host/db     ─► CREATE DATABASE flotilla_<scenario>_<pid>_<seconds>
//!                            hub: postgres://host/flotilla_<scenario>_…   (DROP … WITH (FORCE))
//!  etcd://h1,h2/prefix    ─► hub: etcd://h1,h2/prefix/<scenario>-<pid>-<seconds>
//!                            (its keys deleted)
//! ```

use crate::Error;

/// `url` with its database (the path) replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (before_query, query) = match rest.find('?') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = before_query.split('/').next().unwrap_or_default();
    format!("{scheme}://{authority}/{database}{query}")
}

/// The run's own room on the store, removed when [`Room::remove`] is called.
pub(crate) enum Room {
    /// A database on the PostgreSQL server; a connection to the server's given database.
    Postgres {
        admin: tokio_postgres::Client,
        database: String,
        url: String,
    },
    /// A prefix on the etcd cluster.
    Etcd {
        client: Box<etcd_client::Client>,
        prefix: String,
        url: String,
    },
}

fn backend(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Store(flotilla_store::Error::backend(format!("room: {what}"), e))
}

impl Room {
    /// Makes a database (`flotilla_<scenario>_<pid>_<seconds>`) or prefix
    /// (`<prefix>/<scenario>-<pid>-<seconds>`) for this run of `scenario`.
    pub(crate) async fn make(url: &str, scenario: &str) -> Result<Room, Error> {
        let stamp = format!(
            "{scenario}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        );
        if url.starts_with("etcd://") {
            let config = flotilla_store_etcd::Config::from_url(url)?;
            let client = crate::server_store::etcd_client(&config).await?;
            let prefix = format!("{}/{}", config.prefix, stamp.replace('_', "-"));
            let url = format!("etcd://{}{prefix}", config.endpoints.join(","));
            Ok(Room::Etcd {
                client: Box::new(client),
                prefix,
                url,
            })
        } else {
            let (admin, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .map_err(|e| backend("connect to postgres", e))?;
            tokio::spawn(connection);
            let database = format!("flotilla_{stamp}");
            admin
                .batch_execute(&format!("CREATE DATABASE {database}"))
                .await
                .map_err(|e| backend("create the run's database", e))?;
            Ok(Room::Postgres {
                admin,
                url: with_database(url, &database),
                database,
            })
        }
    }

    /// The store URL the run's hubs use.
    pub(crate) fn url(&self) -> &str {
        match self {
            Room::Postgres { url, .. } | Room::Etcd { url, .. } => url,
        }
    }

    /// The engine's name: `postgres` or `etcd`.
    pub(crate) fn engine(&self) -> &'static str {
        match self {
            Room::Postgres { .. } => "postgres",
            Room::Etcd { .. } => "etcd",
        }
    }

    /// Removes the database or the prefix's keys (the hubs stopped first).
    pub(crate) async fn remove(self) -> Result<(), Error> {
        match self {
            Room::Postgres {
                admin, database, ..
            } => admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
                .await
                .map_err(|e| backend("drop the run's database", e)),
            Room::Etcd {
                mut client, prefix, ..
            } => client
                .delete(
                    format!("{prefix}/"),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                )
                .await
                .map(drop)
                .map_err(|e| backend("delete the run's prefix", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_gets_a_database_of_its_own() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/flotilla?sslmode=disable", "run1"),
            "postgres://u:p@h:5432/run1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:5432", "run1"),
            "postgres://h:5432/run1"
        );
        assert_eq!(
            with_database("postgresql://h/db", "run1"),
            "postgresql://h/run1"
        );
    }
}
