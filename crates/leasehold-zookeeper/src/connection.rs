//! One ZooKeeper session at a time, replaced when it expires, and the mapping of the client's
//! errors into [`StoreError`].

use std::future::Future;
use std::time::Duration;

use leasehold::StoreError;
use tokio::sync::Mutex;
use tokio::time::{timeout_at, Instant};
use zookeeper_client::{Client, Error as ZkError};

use crate::options::ZookeeperOptions;

/// The current session, or none after it expired; the next call establishes a new one.
#[derive(Debug)]
pub(crate) struct Connection {
    options: ZookeeperOptions,
    current: Mutex<Option<Client>>,
}

impl Connection {
    pub(crate) fn new(options: ZookeeperOptions) -> Connection {
        Connection {
            options,
            current: Mutex::new(None),
        }
    }

    pub(crate) fn options(&self) -> &ZookeeperOptions {
        &self.options
    }

    /// Runs `call` with a live session, the whole of it bounded by the call timeout.
    ///
    /// Failing to get a session is [`StoreError::Unavailable`] (nothing was sent); running out
    /// of time once a request may have been sent is [`StoreError::Timeout`] (its effect is
    /// unknown).
    pub(crate) async fn run<T, F, Fut>(&self, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.run_within(self.options.call_timeout_limit(), call)
            .await
    }

    /// [`Connection::run`] bounded by `limit` instead of the call timeout.
    pub(crate) async fn run_within<T, F, Fut>(
        &self,
        limit: Duration,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let deadline = Instant::now() + limit;
        let client = self.client(deadline).await?;
        match timeout_at(deadline, call(client)).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(limit)),
        }
    }

    /// The live session, establishing a new one if there is none or it has ended.
    pub(crate) async fn client(&self, deadline: Instant) -> Result<Client, StoreError> {
        let mut current = match timeout_at(deadline, self.current.lock()).await {
            Ok(guard) => guard,
            Err(_) => return Err(no_session("another call is still establishing a session")),
        };
        if let Some(client) = current.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
            tracing::info!(state = %client.state(), "ZooKeeper session ended; establishing a new one");
            *current = None;
        }
        let connector = Client::connector()
            .with_session_timeout(self.options.session_timeout_limit())
            .with_connection_timeout(self.options.call_timeout_limit())
            // Report an unreachable ensemble now rather than retrying until the deadline.
            .with_fail_eagerly();
        let client =
            match timeout_at(deadline, connector.connect(self.options.connect_string())).await {
                Ok(Ok(client)) => client,
                Ok(Err(error)) => {
                    return Err(StoreError::unavailable(
                        "cannot establish a ZooKeeper session",
                        error,
                    ))
                }
                Err(_) => return Err(no_session("establishing a session took too long")),
            };
        *current = Some(client.clone());
        Ok(client)
    }
}

fn no_session(message: &str) -> StoreError {
    StoreError::Unavailable {
        message: format!("no ZooKeeper session: {message}"),
        source: None,
    }
}

/// Maps an error that has no record-specific meaning at the call site.
pub(crate) fn map_error(error: ZkError) -> StoreError {
    match error {
        ZkError::Throttled => StoreError::Throttled {
            message: "ZooKeeper throttled the request".to_owned(),
        },
        ZkError::BadArguments(_) => {
            StoreError::Invalid(format!("ZooKeeper refused the request: {error}"))
        }
        other => StoreError::unavailable("ZooKeeper request failed", other),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn errors_map_to_what_callers_can_do() {
        assert!(matches!(
            map_error(ZkError::Throttled),
            StoreError::Throttled { .. }
        ));
        for transient in [
            ZkError::ConnectionLoss,
            ZkError::SessionExpired,
            ZkError::Timeout,
            ZkError::NoHosts,
        ] {
            let mapped = map_error(transient.clone());
            assert!(
                matches!(
                    mapped,
                    StoreError::Unavailable {
                        source: Some(_),
                        ..
                    }
                ),
                "{transient:?} -> {mapped:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_within_the_call_timeout() {
        // Port 1 on loopback refuses connections.
        let connection = Connection::new(
            ZookeeperOptions::new(["127.0.0.1:1"])
                .session_timeout(Duration::from_secs(4))
                .call_timeout(Duration::from_millis(500)),
        );
        let started = std::time::Instant::now();
        let result = connection.run(|_client| async { Ok(()) }).await;
        assert!(
            matches!(result, Err(StoreError::Unavailable { .. })),
            "{result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
