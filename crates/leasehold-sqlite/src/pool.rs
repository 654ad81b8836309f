//! A small pool of connections, used from blocking threads so the async runtime never waits
//! on SQLite.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold::StoreError;
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::error::{is_busy, Context};
use crate::options::SqliteOptions;
use crate::schema;

/// Connections to one database file, at most `max_connections` of them.
pub(crate) struct Pool {
    path: PathBuf,
    options: SqliteOptions,
    /// Connections not in use. Never longer than the number of permits.
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may be in use at once.
    permits: Arc<Semaphore>,
    /// The file opened: its device and inode.
    identity: Option<FileIdentity>,
    /// Set for good once the file at `path` is found not to be the one opened.
    moved: AtomicBool,
}

/// A file's device and inode: what tells the file opened from another put at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let metadata = std::fs::metadata(path)?;
        Ok(FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Opens `path`, creating the file and its schema if needed, and keeps that first
    /// connection for reuse.
    pub(crate) async fn open(path: &Path, options: SqliteOptions) -> Result<Pool, StoreError> {
        options.validate()?;
        let path = std::path::absolute(path).map_err(|error| {
            StoreError::unavailable(format!("resolving the path {}", path.display()), error)
        })?;
        // Opening may create or upgrade the schema, and processes starting together on a new
        // file wait for the one doing it: a one-time wait for the write lock, bounded by the
        // busy timeout rather than the (possibly much shorter) limit on each later call.
        let limit = options
            .busy_timeout_limit()
            .max(options.call_timeout_limit());
        let opening = tokio::task::spawn_blocking({
            let path = path.clone();
            let options = options.clone();
            move || open_first(&path, &options)
        });
        let connection = match tokio::time::timeout(limit, opening).await {
            Ok(joined) => joined.map_err(|error| {
                StoreError::unavailable("the thread opening the database failed", error)
            })??,
            Err(_) => return Err(StoreError::Timeout(limit)),
        };
        // Read once the file exists; a path that cannot be read (a special file) goes
        // unchecked rather than failing every call.
        let identity = FileIdentity::of(&path).ok();
        Ok(Pool {
            permits: Arc::new(Semaphore::new(options.connection_limit())),
            idle: Mutex::new(vec![connection]),
            path,
            options,
            identity,
            moved: AtomicBool::new(false),
        })
    }

    /// The absolute path of the database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The settings the pool was opened with.
    pub(crate) fn options(&self) -> &SqliteOptions {
        &self.options
    }

    /// Runs `operation` on a connection in a blocking thread, within the call timeout.
    ///
    /// If the caller stops waiting (time-out or cancellation), the operation still runs to its
    /// end, and its connection returns to the pool. So that it seldom commits after the call
    /// timed out, its wait for the write lock ends early enough to leave
    /// [`SqliteOptions::write_allowance`] of the call's time for the write itself; a write
    /// slower than that still commits late.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, operation: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let limit = self.options.call_timeout_limit();
        let deadline = Instant::now() + limit;
        let pool = Arc::clone(self);
        let call = async move {
            let permit = Arc::clone(&pool.permits)
                .acquire_owned()
                .await
                .map_err(|error| StoreError::unavailable("the connection pool is closed", error))?;
            let work = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                pool.with_connection(deadline, operation)
            });
            work.await.map_err(|error| {
                StoreError::unavailable("the thread running the SQLite call failed", error)
            })?
        };
        match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(limit)),
        }
    }

    /// Fails, for good, once the file at the path is not the one opened: deleted, or
    /// replaced by another. Writes to the old file would reach no other process, and a new
    /// file holds another table whose records know nothing of this one's leases; every
    /// call fails instead, so that the leases held here expire on schedule.
    fn check_file(&self) -> Result<(), StoreError> {
        let Some(opened) = self.identity else {
            return Ok(());
        };
        let moved = self.moved.load(Ordering::Relaxed)
            || FileIdentity::of(&self.path).map_or(true, |now| now != opened);
        if !moved {
            return Ok(());
        }
        if !self.moved.swap(true, Ordering::Relaxed) {
            tracing::error!(path = %self.path.display(), "the database file was deleted or replaced since it was opened; every call fails from now on: restart to open the file now at this path");
        }
        Err(StoreError::Invalid(format!(
            "the database file {} was deleted or replaced since it was opened; restart to \
             open the file now at this path",
            self.path.display()
        )))
    }

    fn lock_idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // The list is only pushed to and popped from, so a panic cannot leave it half-changed.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_connection<T>(
        &self,
        deadline: Instant,
        operation: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let limit = self.options.call_timeout_limit();
        let idle = self.lock_idle().pop();
        let mut connection = match idle {
            Some(connection) => connection,
            None => schema::connect(&self.path, &self.options)?,
        };
        // Checked after connecting: a connection opened before a move is to the file this
        // pool opened, and one opened after it is refused here.
        if let Err(error) = self.check_file() {
            self.lock_idle().push(connection);
            return Err(error);
        }
        // What is left of the call, less the write's own allowance, bounds the lock wait: a
        // call that queued for a connection or a thread waits less, or not at all.
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.saturating_sub(self.options.write_allowance());
        if wait.is_zero() {
            self.lock_idle().push(connection);
            return Err(StoreError::Timeout(limit));
        }
        connection
            .busy_timeout(wait.min(self.options.busy_timeout_limit()))
            .context("setting the busy timeout")?;
        let result = operation(&mut connection);
        // A connection left inside a transaction would hold the write lock; drop it instead.
        if connection.is_autocommit() {
            self.lock_idle().push(connection);
        }
        result
    }
}

/// Opens the first connection and prepares the schema, waiting out lock contention (other
/// processes opening the same new file) for up to the busy timeout.
fn open_first(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    const PAUSE: Duration = Duration::from_millis(20);
    let deadline = Instant::now() + options.busy_timeout_limit();
    loop {
        let attempt = schema::connect(path, options).and_then(|mut connection| {
            schema::prepare(&mut connection, path)?;
            Ok(connection)
        });
        match attempt {
            Err(error) if is_busy(&error) && Instant::now() + PAUSE < deadline => {
                std::thread::sleep(PAUSE);
            }
            other => return other,
        }
    }
}
