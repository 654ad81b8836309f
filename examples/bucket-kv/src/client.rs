//! The client: routes each key to its bucket's owner with leasehold's [`Router`], and on a
//! `not owner` answer corrects the map and retries, a bounded number of times.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::backoff::Backoff;
use leasehold::{GroupName, LeaseStore, NodeId, NotOwner, PartitionId, Router};
use reqwest::{Method, StatusCode};

use crate::api::{ErrorBody, Read, Written, GROUP, MAX_KEY_BYTES};

/// How a client retries.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// The most attempts per request, the first included.
    pub attempts: u32,
    /// The wait before the first retry that is not to a newly named address; doubles each time.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// The limit on each HTTP attempt.
    pub request_timeout: Duration,
    /// No retry starts later than this after the request was issued.
    pub give_up_after: Duration,
}

impl Default for RetryPolicy {
    /// At most 16 attempts within 3 s: long enough to ride out a bucket moving twice in a
    /// row (a server stops and comes back, each move one scan of the taker plus the time for
    /// maps to catch up), short enough that a caller hears about an outage promptly.
    fn default() -> Self {
        RetryPolicy {
            attempts: 16,
            first_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(250),
            request_timeout: Duration::from_secs(2),
            give_up_after: Duration::from_secs(3),
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The key is empty, too long, or has characters other than ASCII letters, digits and
    /// `-_.:~` (the client does not percent-encode).
    #[error("invalid key {0:?}")]
    InvalidKey(String),
    /// The server refused the request itself (a 4xx other than `not owner`).
    #[error("the server refused the request: {status} {error}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The server's `error` field.
        error: String,
    },
    /// Every attempt failed; `last` says how the last one did.
    #[error("gave up after {attempts} attempts: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// What went wrong the last time.
        last: String,
    },
}

/// A reply, with how many attempts it took and how many of them reached a non-owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    /// The reply.
    pub reply: T,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Attempts answered `not owner` (or refused as stale).
    pub misroutes: u32,
}

/// A bucket-kv client. Cheap to clone; clones share the map and the connection pool.
#[derive(Clone, Debug)]
pub struct Client {
    router: Router,
    http: reqwest::Client,
    /// Servers to ask when the map names no owner: any server answers with its own hint.
    seeds: Arc<[String]>,
    next_seed: Arc<AtomicUsize>,
    policy: RetryPolicy,
    misroutes: Arc<AtomicU64>,
}

enum Attempt<T> {
    Done(T),
    /// Try again at once, at this address.
    Redirect(String),
    /// Wait, then try again wherever the map says; `misrouted` if the server did not own
    /// the bucket.
    Retry {
        why: String,
        misrouted: bool,
    },
}

impl Client {
    /// A client for the buckets in `store`, following the store for ownership changes.
    /// `seeds` are server URLs to try when the map names no owner for a bucket.
    pub async fn connect(
        store: Arc<dyn LeaseStore>,
        buckets: u32,
        seeds: Vec<String>,
        policy: RetryPolicy,
    ) -> anyhow::Result<Client> {
        let group = GroupName::new(GROUP)?;
        let router = Router::follow(store, group, buckets, Duration::from_secs(2)).await?;
        let http = reqwest::Client::builder()
            .timeout(policy.request_timeout)
            .connect_timeout(policy.request_timeout)
            .build()?;
        Ok(Client {
            router,
            http,
            seeds: seeds.into(),
            next_seed: Arc::new(AtomicUsize::new(0)),
            policy,
            misroutes: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The bucket of `key`: leasehold's FNV-1a partition of it, as the servers compute it.
    pub fn bucket_of(&self, key: &str) -> u32 {
        self.router.partition_of(key).0
    }

    /// Attempts answered `not owner` by any request of this client or its clones, so far.
    pub fn misroutes(&self) -> u64 {
        self.misroutes.load(Ordering::Relaxed)
    }

    /// Stores `value` under `key`.
    pub async fn put(&self, key: &str, value: &str) -> Result<Outcome<Written>, ClientError> {
        self.call(Method::PUT, key, Some(value)).await
    }

    /// Reads `key`.
    pub async fn get(&self, key: &str) -> Result<Outcome<Read>, ClientError> {
        self.call(Method::GET, key, None).await
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: &str) -> Result<Outcome<Written>, ClientError> {
        self.call(Method::DELETE, key, None).await
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        key: &str,
        body: Option<&str>,
    ) -> Result<Outcome<T>, ClientError> {
        check_key(key)?;
        let partition = self.router.partition_of(key);
        let mut backoff = Backoff::new(self.policy.first_backoff, self.policy.max_backoff);
        let mut redirect: Option<String> = None;
        let mut redirected = false;
        let mut misroutes = 0;
        let mut last = String::from("no attempt made");
        let give_up_at = tokio::time::Instant::now() + self.policy.give_up_after;
        let mut attempts = 0;
        while attempts < self.policy.attempts {
            attempts += 1;
            let address = match redirect.take() {
                Some(address) => Some(address),
                None => {
                    if attempts > 1 {
                        if tokio::time::Instant::now() + backoff.next() > give_up_at {
                            break;
                        }
                        tokio::time::sleep(backoff.failed()).await;
                    }
                    self.address(key)
                }
            };
            let Some(address) = address else {
                last = format!("no owner known for bucket {partition}");
                self.reread(partition).await;
                continue;
            };
            let result = self
                .attempt(&method, &address, key, body, partition)
                .await?;
            match result {
                Attempt::Done(reply) => {
                    return Ok(Outcome {
                        reply,
                        attempts,
                        misroutes,
                    })
                }
                Attempt::Redirect(next) => {
                    misroutes += 1;
                    last = format!("{address} is not the owner of bucket {partition}");
                    tracing::debug!(%partition, attempts, %address, %next, "redirected");
                    // At once to a newly named server, but never twice in a row: two servers
                    // with stale maps could otherwise send the request back and forth
                    // without a pause.
                    if !redirected && next != address {
                        redirect = Some(next);
                    }
                    redirected = redirect.is_some();
                }
                Attempt::Retry { why, misrouted } => {
                    misroutes += u32::from(misrouted);
                    tracing::debug!(%partition, attempts, %address, %why, "attempt failed");
                    last = format!("{address}: {why}");
                    redirected = false;
                }
            }
        }
        Err(ClientError::Exhausted { attempts, last })
    }

    /// Where the map sends `key`, or a seed server if it names nobody.
    fn address(&self, key: &str) -> Option<String> {
        if let Some(address) = self.router.route(key).address {
            return Some(address.to_string());
        }
        if self.seeds.is_empty() {
            return None;
        }
        let index = self.next_seed.fetch_add(1, Ordering::Relaxed) % self.seeds.len();
        self.seeds.get(index).cloned()
    }

    async fn reread(&self, partition: PartitionId) {
        if let Err(error) = self.router.invalidate(partition).await {
            tracing::debug!(%partition, %error, "could not re-read the bucket's owner");
        }
    }

    async fn attempt<T: serde::de::DeserializeOwned>(
        &self,
        method: &Method,
        address: &str,
        key: &str,
        body: Option<&str>,
        partition: PartitionId,
    ) -> Result<Attempt<T>, ClientError> {
        let mut request = self
            .http
            .request(method.clone(), format!("{address}/kv/{key}"));
        if let Some(body) = body {
            request = request.body(body.to_owned());
        }
        // Every operation is idempotent (set, read, delete), so any failed attempt may be
        // repeated, even one the server may have applied.
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                // The map may name a server that has gone: ask the store who holds it now.
                self.reread(partition).await;
                return Ok(Attempt::Retry {
                    why: format!("request failed: {error}"),
                    misrouted: false,
                });
            }
        };
        let status = response.status();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => {
                return Ok(Attempt::Retry {
                    why: format!("reading the answer failed: {error}"),
                    misrouted: false,
                })
            }
        };
        if status == StatusCode::OK {
            return match serde_json::from_slice(&bytes) {
                Ok(reply) => Ok(Attempt::Done(reply)),
                Err(error) => Ok(Attempt::Retry {
                    why: format!("unreadable answer: {error}"),
                    misrouted: false,
                }),
            };
        }
        let error: Option<ErrorBody> = serde_json::from_slice(&bytes).ok();
        if status == StatusCode::MISDIRECTED_REQUEST {
            self.misroutes.fetch_add(1, Ordering::Relaxed);
            return Ok(self.not_owner(partition, error).await);
        }
        if status == StatusCode::CONFLICT {
            // A write refused as stale: its server lost the bucket; find the new owner.
            self.misroutes.fetch_add(1, Ordering::Relaxed);
            self.reread(partition).await;
            return Ok(Attempt::Retry {
                why: "stale epoch".to_owned(),
                misrouted: true,
            });
        }
        if status.is_client_error() {
            return Err(ClientError::Rejected {
                status: status.as_u16(),
                error: error.map(|error| error.error).unwrap_or_default(),
            });
        }
        Ok(Attempt::Retry {
            why: format!("status {status}"),
            misrouted: false,
        })
    }

    /// Corrects the map after a `not owner` answer: takes the server's hint when it names an
    /// owner with an address, otherwise re-reads the bucket from the store.
    async fn not_owner<T>(&self, partition: PartitionId, error: Option<ErrorBody>) -> Attempt<T> {
        let hint = error.as_ref().and_then(|error| {
            let owner = NodeId::new(error.owner.as_deref()?).ok()?;
            Some((owner, error.address.clone()?))
        });
        match hint {
            Some((owner, address)) => {
                let answer = NotOwner {
                    partition,
                    owner_hint: Some(owner),
                };
                // A hint corrects the map without a store read; it cannot fail.
                let _ = self.router.not_owner(&answer).await;
                Attempt::Redirect(address)
            }
            None => {
                self.reread(partition).await;
                Attempt::Retry {
                    why: "not owner, no hint".to_owned(),
                    misrouted: true,
                }
            }
        }
    }
}

/// Keys go into the URL path as they are: only characters that need no encoding.
fn check_key(key: &str) -> Result<(), ClientError> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:~".contains(&byte));
    if valid {
        Ok(())
    } else {
        Err(ClientError::InvalidKey(key.to_owned()))
    }
}
