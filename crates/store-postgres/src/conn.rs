//! Connections: made with a timeout, driven by a task of their own, and a small pool.
//!
//! ```text
//!  Pool ── get ──► idle connection (or a new one, at most `size` at once) ──► drop: back
//!                  to idle unless the server closed it
//!  connect(notify) ── task: poll the connection; NOTIFY messages ──► notify channel
//! ```
//!
//! A connection the server dropped is never handed out again: the next `get` connects
//! anew, so the store recovers by itself once the server is back.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use flotilla_store::{Error, Result};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, SemaphorePermit, mpsc};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Connection, NoTls, Row, Statement};
use tracing::debug;

use crate::url::Target;

/// Connects to `target` within `timeout`. The connection is driven by a spawned task;
/// notifications it receives are sent on `notify`, when given.
pub async fn connect(
    target: &Target,
    timeout: Duration,
    notify: Option<mpsc::UnboundedSender<()>>,
) -> Result<Client> {
    let server = &target.server;
    let attempt = async {
        match &target.tls {
            None => {
                let (client, connection) = target.config.connect(NoTls).await?;
                tokio::spawn(drive(connection, notify, server.clone()));
                Ok(client)
            }
            Some(tls) => {
                let (client, connection) = target.config.connect(tls.clone()).await?;
                tokio::spawn(drive(connection, notify, server.clone()));
                Ok(client)
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(crate::error::map("connect", server, e)),
        Err(_) => Err(Error::Unavailable {
            message: format!("connect to {server}: no answer within {timeout:?}"),
            source: None,
        }),
    }
}

/// Polls a connection until it closes, forwarding notifications.
async fn drive<S, T>(
    mut connection: Connection<S, T>,
    notify: Option<mpsc::UnboundedSender<()>>,
    server: String,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(_)) => {
                if let Some(notify) = &notify {
                    let _ = notify.send(());
                }
            }
            Ok(_) => {}
            Err(e) => {
                debug!(%server, error = %e, "connection to the store's database closed");
                break;
            }
        }
    }
}

/// A connection with the statements it has prepared (each prepared once per connection:
/// an unprepared query costs a second round trip).
pub struct Conn {
    /// The connection.
    pub client: Client,
    statements: HashMap<&'static str, Statement>,
    server: String,
}

impl Conn {
    /// A connection without prepared statements.
    pub fn new(client: Client, server: &str) -> Self {
        Conn {
            client,
            statements: HashMap::new(),
            server: server.to_owned(),
        }
    }

    /// `sql`, prepared on this connection.
    pub async fn statement(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self
            .client
            .prepare(sql)
            .await
            .map_err(|e| crate::error::map("prepare a statement", &self.server, e))?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs the prepared `sql`; `what` names it in errors.
    pub async fn query(
        &mut self,
        what: &str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let statement = self.statement(sql).await?;
        self.client
            .query(&statement, params)
            .await
            .map_err(|e| crate::error::map(what, &self.server, e))
    }

    /// Whether the server closed the connection.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// At most `size` connections, kept while the server keeps them open.
pub struct Pool {
    target: Target,
    timeout: Duration,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

/// A connection taken from a [`Pool`]; it goes back when dropped.
pub struct Pooled<'a> {
    client: Option<Conn>,
    pool: &'a Pool,
    _permit: SemaphorePermit<'a>,
}

impl Pool {
    /// A pool of up to `size` connections to `target`, each made within `timeout`.
    pub fn new(target: Target, size: usize, timeout: Duration) -> Self {
        Pool {
            target,
            timeout,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// A connection: an idle one, or a new one.
    pub async fn get(&self) -> Result<Pooled<'_>> {
        let permit = self.permits.acquire().await.map_err(|_| Error::Closed)?;
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                match idle.pop() {
                    Some(client) if client.is_closed() => continue,
                    other => break other,
                }
            }
        };
        let client = match idle {
            Some(client) => client,
            None => Conn::new(
                connect(&self.target, self.timeout, None).await?,
                &self.target.server,
            ),
        };
        Ok(Pooled {
            client: Some(client),
            pool: self,
            _permit: permit,
        })
    }

    /// Drops every idle connection (after the server was lost, so none is tried again).
    pub fn clear(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.client
            .as_ref()
            .expect("a pooled connection is present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.client
            .as_mut()
            .expect("a pooled connection is present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && !client.is_closed()
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(client);
        }
    }
}
