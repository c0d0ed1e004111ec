//! Hot reload: a policy file watched with `notify`, re-applied all or nothing after
//! each burst of changes.

use super::{ConfigError, Format, LoadReport, Problem, ProblemKind};
use crate::builder::builder;
use crate::registry::Registry;
use crate::sync::mpsc::{self, RecvTimeoutError};
use crate::sync::Recover;
use crate::sync::{Arc, Mutex};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use std::fmt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Called after every reload attempt with what it did.
type Callback = Arc<dyn Fn(Result<&LoadReport, &ConfigError>) + Send + Sync>;

/// How a [`PolicyWatcher`] behaves; build it with [`WatchOptions::builder`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::config::WatchOptions;
/// use std::time::Duration;
///
/// let options = WatchOptions::builder()
///     .debounce(Duration::from_millis(100))
///     .on_reload(|result| match result {
///         Ok(report) => println!("policies v{} applied", report.version),
///         Err(e) => eprintln!("policy file kept at its last good version: {e}"),
///     })
///     .build();
/// # let _ = options;
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct WatchOptions {
    debounce: Duration,
    settle: Duration,
    on_reload: Option<Callback>,
}

impl fmt::Debug for WatchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchOptions")
            .field("debounce", &self.debounce)
            .field("settle", &self.settle)
            .field("on_reload", &self.on_reload.is_some())
            .finish()
    }
}

impl Default for WatchOptions {
    /// A 200 ms debounce, a 500 ms settle period and no callback.
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(200),
            settle: Duration::from_millis(500),
            on_reload: None,
        }
    }
}

impl WatchOptions {
    /// Starts from the defaults: a 200 ms debounce, a 500 ms settle period and no
    /// callback.
    pub fn builder() -> WatchOptionsBuilder {
        WatchOptionsBuilder {
            config: WatchOptions::default(),
        }
    }
}

builder! {
    /// Builds [`WatchOptions`]; start from [`WatchOptions::builder`]. Each setter is
    /// named after the option it sets.
    pub struct WatchOptionsBuilder => WatchOptions;

    /// Returns the options (every value is accepted).
    build -> Infallible;

    /// How long the file must stay quiet after a change before it is read (default
    /// 200 ms): editors often write a file in several steps (truncate, write,
    /// rename), and reading in between would see a half-written file. A file that
    /// keeps changing is still read at least every ten debounce periods.
    debounce: Duration,
    /// How long apart two reads of the file must agree before it is applied (default
    /// 500 ms): a writer that pauses longer than the debounce half-way through would
    /// otherwise have its half-written file applied. Content still changing is never
    /// applied; a writer that pauses longer than debounce plus settle cannot be told
    /// from a finished one, so writing a new file and renaming it over the old stays
    /// the safe way.
    settle: Duration,
}

impl WatchOptionsBuilder {
    /// A function called on the watcher's thread after every reload attempt: with the
    /// report of an applied file, or with the error of a rejected one (the last good
    /// policies stay in force); and when a rejected file is restored to the content in
    /// force, with the report of the policies in force (the file is good again, and
    /// nothing new was applied). It is not called for the initial load, whose result
    /// [`Registry::watch_policies`] returns. It must not drop the watcher itself.
    #[must_use = "a setter returns the changed builder"]
    pub fn on_reload<F>(mut self, on_reload: F) -> Self
    where
        F: Fn(Result<&LoadReport, &ConfigError>) + Send + Sync + 'static,
    {
        self.config.on_reload = Some(Arc::new(on_reload));
        self
    }
}

/// The state of a watched policy file, from [`PolicyWatcher::status`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WatchStatus {
    /// The version of the policies in force (see [`LoadReport::version`]): the
    /// registry's policy-file version after the last load this watcher applied.
    pub version: u64,
    /// What the last applied load did.
    pub last_applied: LoadReport,
    /// Why the file as it is now is not applied, if it is not; `None` once a good
    /// version is applied (or the file is back to the last good content).
    pub last_error: Option<Arc<ConfigError>>,
    /// Reload attempts after the initial load, good or bad.
    pub reloads: u64,
    /// Rejected reload attempts.
    pub failures: u64,
    /// When the file was last read.
    pub last_checked: SystemTime,
}

/// Watches a policy file and re-applies it when it changes; stops when dropped.
///
/// Created by [`Registry::watch_policies`]. A change is applied with the same rule as
/// [`Registry::load_policies`]: all of it or, if anything is wrong, none of it, and
/// then the last good policies stay in force while [`status`](PolicyWatcher::status)
/// (and the [`on_reload`](WatchOptionsBuilder::on_reload) callback) says why.
///
/// The watcher watches the file's directory, so files replaced by a rename (most
/// editors) or through a symlink swap (Kubernetes ConfigMaps) are seen; any change in
/// the directory leads to one read after the debounce, and content equal to the last
/// applied one is not applied again.
pub struct PolicyWatcher {
    path: PathBuf,
    shared: Arc<Mutex<WatchStatus>>,
    // Dropped first: no new events once the watcher is being dropped.
    watcher: Option<RecommendedWatcher>,
    stop: mpsc::Sender<Message>,
    worker: Option<JoinHandle<()>>,
}

impl fmt::Debug for PolicyWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyWatcher")
            .field("path", &self.path)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl PolicyWatcher {
    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version in force and the last error, if the file as it is now is broken.
    pub fn status(&self) -> WatchStatus {
        self.shared.lock().recover().clone()
    }
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        drop(self.watcher.take());
        let _ = self.stop.send(Message::Stop);
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

enum Message {
    Changed,
    Stop,
}

impl Registry {
    /// Loads a policy file, then watches it and re-applies it after every change, with
    /// default [`WatchOptions`].
    ///
    /// # Errors
    ///
    /// The initial load's error (nothing is applied and nothing is watched), or
    /// [`ConfigError::Watch`] if the file system watcher cannot be started.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use resilience_runtime::registry;
    ///
    /// let watcher = registry().watch_policies("/etc/my-service/policies.toml")?;
    /// println!("policies v{} in force", watcher.status().version);
    /// // keep `watcher` alive for as long as the file should be followed
    /// # Ok::<(), resilience_runtime::config::ConfigError>(())
    /// ```
    pub fn watch_policies(
        &'static self,
        path: impl AsRef<Path>,
    ) -> Result<PolicyWatcher, ConfigError> {
        self.watch_policies_with(path, WatchOptions::default())
    }

    /// Like [`watch_policies`](Registry::watch_policies), with options.
    ///
    /// # Errors
    ///
    /// As for [`watch_policies`](Registry::watch_policies).
    pub fn watch_policies_with(
        &'static self,
        path: impl AsRef<Path>,
        options: WatchOptions,
    ) -> Result<PolicyWatcher, ConfigError> {
        let path = path.as_ref().to_owned();
        let format = Format::from_path(&path)?;
        let (text, report) = read_and_load(self, &path, format)?;
        let shared = Arc::new(Mutex::new(WatchStatus {
            version: report.version,
            last_applied: report,
            last_error: None,
            reloads: 0,
            failures: 0,
            last_checked: SystemTime::now(),
        }));

        let (tx, rx) = mpsc::channel();
        let events = tx.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                // Our own reads show up as access events; only changes matter. A watcher
                // error (say, a queue overflow) may hide a change: read to be sure.
                let relevant = match &event {
                    Ok(event) => !matches!(event.kind, EventKind::Access(_)),
                    Err(_) => true,
                };
                if relevant {
                    let _ = events.send(Message::Changed);
                }
            })
            .map_err(|error| ConfigError::Watch {
                path: path.clone(),
                error,
            })?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|error| ConfigError::Watch {
                path: path.clone(),
                error,
            })?;

        let worker = Worker {
            registry: self,
            path: path.clone(),
            format,
            last_good: text,
            status: Arc::clone(&shared),
            on_reload: options.on_reload,
        };
        let debounce = options.debounce;
        let settle = options.settle;
        let worker = std::thread::Builder::new()
            .name("resilience-policy-watch".into())
            .spawn(move || worker.run(&rx, debounce, settle))
            .map_err(|error| ConfigError::Io {
                path: path.clone(),
                error,
            })?;
        Ok(PolicyWatcher {
            path,
            shared,
            watcher: Some(watcher),
            stop: tx,
            worker: Some(worker),
        })
    }
}

fn read_and_load(
    registry: &Registry,
    path: &Path,
    format: Format,
) -> Result<(String, LoadReport), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
        path: path.to_owned(),
        error,
    })?;
    let report = registry.load_text(&text, format, Some(path))?;
    Ok((text, report))
}

struct Worker {
    registry: &'static Registry,
    path: PathBuf,
    format: Format,
    /// The content of the file as last applied.
    last_good: String,
    status: Arc<Mutex<WatchStatus>>,
    on_reload: Option<Callback>,
}

impl Worker {
    fn run(mut self, rx: &mpsc::Receiver<Message>, quiet: Duration, settle: Duration) {
        let start = Instant::now();
        let now = || crate::clock::nanos(start.elapsed());
        let quiet_ns = crate::clock::nanos(quiet);
        let settle_ns = crate::clock::nanos(settle);
        let mut debouncer = Debouncer::new(quiet_ns, quiet_ns.saturating_mul(10));
        // A read waiting for a second one, a settle period later, to agree with it.
        let mut settling: Option<(String, u64)> = None;
        loop {
            let settle_wait = settling
                .as_ref()
                .map(|(_, at)| at.saturating_add(settle_ns).saturating_sub(now()));
            let wait = match (debouncer.wait(now()), settle_wait) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let message = match wait {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(wait) => rx.recv_timeout(Duration::from_nanos(wait)),
            };
            match message {
                Ok(Message::Changed) => {
                    // Still being written: start over once it goes quiet again.
                    settling = None;
                    debouncer.event(now());
                }
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if debouncer.due(now()) {
                if let Some(text) = self.read() {
                    settling = Some((text, now()));
                }
            }
            if let Some((first, at)) = &settling {
                if now() >= at.saturating_add(settle_ns) {
                    match self.read() {
                        Some(again) if again == *first => {
                            settling = None;
                            self.reload(again);
                        }
                        // Changed in between: wait for it to agree with itself.
                        Some(again) => settling = Some((again, now())),
                        None => settling = None,
                    }
                }
            }
        }
    }

    /// Reads the file; a read error is recorded (and `None` returned).
    fn read(&mut self) -> Option<String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Some(text),
            Err(error) => {
                let error = ConfigError::Io {
                    path: self.path.clone(),
                    error,
                };
                self.record(Err(error), None);
                None
            }
        }
    }

    /// Applies `text`, read twice a settle period apart with the same content.
    fn reload(&mut self, text: String) {
        if text.trim().is_empty() {
            // What a truncating save looks like half-way. Clearing every policy takes a
            // file that says so: an empty `[points]` table, or `{}` in JSON.
            let error = ConfigError::Invalid {
                path: Some(self.path.clone()),
                problems: vec![Problem::new(
                    None,
                    None,
                    ProblemKind::Syntax,
                    "the file is empty; not applied (write an empty `[points]` table, or `{}` \
                     in JSON, to remove every policy)",
                )],
            };
            self.record(Err(error), None);
            return;
        }
        if text == self.last_good {
            // Touched, or back to the last good content: nothing to apply. If the file
            // was rejected before, it is good again: say so.
            let recovered = {
                let mut status = self.status.lock().recover();
                status.last_checked = SystemTime::now();
                status
                    .last_error
                    .take()
                    .map(|_| status.last_applied.clone())
            };
            if let Some(report) = recovered {
                #[cfg(feature = "tracing")]
                tracing::info!(
                    file = %self.path.display(),
                    version = report.version,
                    "policy file valid again (back to the policies in force)"
                );
                if let Some(callback) = &self.on_reload {
                    callback(Ok(&report));
                }
            }
            return;
        }
        let result = self
            .registry
            .load_text(&text, self.format, Some(&self.path));
        self.record(result, Some(text));
    }

    fn record(&mut self, result: Result<LoadReport, ConfigError>, text: Option<String>) {
        {
            let mut status = self.status.lock().recover();
            status.reloads += 1;
            status.last_checked = SystemTime::now();
            match &result {
                Ok(report) => {
                    status.version = report.version;
                    status.last_applied = report.clone();
                    status.last_error = None;
                }
                Err(e) => {
                    status.failures += 1;
                    status.last_error = Some(Arc::new(clone_error(e)));
                }
            }
        }
        match &result {
            Ok(_) => {
                if let Some(text) = text {
                    self.last_good = text;
                }
            }
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(
                    file = %self.path.display(),
                    error = %crate::util::error_chain(_e),
                    "policy file change rejected; the last good policies stay in force"
                );
            }
        }
        if let Some(callback) = &self.on_reload {
            callback(result.as_ref());
        }
    }
}

/// A copy of an error for the status (io and notify errors are not `Clone`; their kind
/// and message are kept).
fn clone_error(e: &ConfigError) -> ConfigError {
    match e {
        ConfigError::Io { path, error } => ConfigError::Io {
            path: path.clone(),
            error: std::io::Error::new(error.kind(), error.to_string()),
        },
        ConfigError::UnknownFormat { path } => ConfigError::UnknownFormat { path: path.clone() },
        ConfigError::Invalid { path, problems } => ConfigError::Invalid {
            path: path.clone(),
            problems: problems.clone(),
        },
        ConfigError::Watch { path, error } => ConfigError::Watch {
            path: path.clone(),
            error: notify::Error::generic(&error.to_string()),
        },
    }
}

/// Trailing-edge debounce on a nanosecond timeline: fires once the events have been
/// quiet for `quiet`, or `max_wait` after the first event of a burst, whichever is first.
#[derive(Debug, Clone, Copy)]
struct Debouncer {
    quiet: u64,
    max_wait: u64,
    /// (first event of the burst, last event), while a burst is pending.
    pending: Option<(u64, u64)>,
}

impl Debouncer {
    fn new(quiet: u64, max_wait: u64) -> Debouncer {
        Debouncer {
            quiet,
            max_wait,
            pending: None,
        }
    }

    fn event(&mut self, now: u64) {
        self.pending = Some(match self.pending {
            Some((first, _)) => (first, now),
            None => (now, now),
        });
    }

    fn deadline(&self) -> Option<u64> {
        self.pending.map(|(first, last)| {
            last.saturating_add(self.quiet)
                .min(first.saturating_add(self.max_wait))
        })
    }

    /// How long to wait for the next event before checking `due`; `None`: no burst
    /// pending, wait for an event.
    fn wait(&self, now: u64) -> Option<u64> {
        self.deadline().map(|d| d.saturating_sub(now))
    }

    /// Whether the pending burst should be handled now; ends the burst if so.
    fn due(&mut self, now: u64) -> bool {
        match self.deadline() {
            Some(d) if now >= d => {
                self.pending = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_fires_once_after_it_goes_quiet() {
        let mut d = Debouncer::new(200 * MS, 2_000 * MS);
        assert_eq!(d.wait(0), None);
        assert!(!d.due(0));
        d.event(10 * MS);
        d.event(50 * MS);
        d.event(120 * MS);
        assert_eq!(d.wait(150 * MS), Some(170 * MS));
        assert!(!d.due(319 * MS));
        assert!(d.due(320 * MS));
        assert!(!d.due(321 * MS), "fires once per burst");
        assert_eq!(d.wait(400 * MS), None);
    }

    #[test]
    fn a_file_that_never_goes_quiet_is_still_read() {
        let mut d = Debouncer::new(200 * MS, 2_000 * MS);
        let mut fired = Vec::new();
        for t in (0..5_000).step_by(100) {
            d.event(t * MS);
            if d.due(t * MS) {
                fired.push(t);
            }
        }
        assert_eq!(fired, [2_000, 4_100]);
    }
}
