//! The `metrics` facade exporter (feature `metrics`): the shared walk set on a
//! `metrics::Recorder`.
//!
//! The registry is read when asked, so this is pull turned push: [`publish`] (or
//! [`PointsCollector::publish`]) sets every series once, and a [`Publisher`] does it
//! on a thread of its own at a fixed interval until it is stopped.

use super::series::{self, Emit, Family, Kind, Sink};
use super::PointsCollector;
use metrics::{Key, KeyName, Label, Level, Metadata, Recorder, SharedString, Unit};
use std::fmt;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The metadata of every series set here (`target`: this module).
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Sets every point of the global registry (at most [`DEFAULT_MAX_POINTS`] one by one)
/// on the recorder in force: the thread's local recorder if one is set
/// (`metrics::with_local_recorder`), else the global one. The same as
/// `PointsCollector::global().publish()`.
///
/// [`DEFAULT_MAX_POINTS`]: super::DEFAULT_MAX_POINTS
///
/// # Examples
///
/// ```
/// use metrics_util::debugging::{DebugValue, DebuggingRecorder};
/// use resilience_runtime::{metrics, registry, Policy};
///
/// registry().set_policy("docs.facade", Policy::builder().max_visits(0).build()?)?;
/// let _ = registry().point("docs.facade")?.enter(); // downgraded
///
/// let recorder = DebuggingRecorder::new();
/// let snapshotter = recorder.snapshotter();
/// ::metrics::with_local_recorder(&recorder, metrics::publish);
///
/// let downgraded = snapshotter.snapshot().into_vec().into_iter().find(|(key, ..)| {
///     let key = key.key();
///     key.name() == "resilience_downgrades_total"
///         && key.labels().any(|l| l.key() == "point" && l.value() == "docs.facade")
///         && key.labels().any(|l| l.key() == "reason" && l.value() == "visits")
/// });
/// assert!(matches!(downgraded, Some((_, _, _, DebugValue::Counter(1)))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn publish() {
    PointsCollector::global().publish();
}

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
impl PointsCollector {
    /// Sets every series of this collector's points on the recorder in force (the
    /// thread's local recorder, else the global one; nothing if none is installed).
    ///
    /// Counters are set with `Counter::absolute` (the registry's count since start;
    /// recorders on `metrics-util`'s storage, `metrics-exporter-prometheus` among
    /// them, keep the largest value set, so a `point="other"` sum that went down stays
    /// at its peak) and gauges with `Gauge::set`. Names and labels are those of
    /// the Prometheus exposition (`resilience_visits_total{point="..."}`);
    /// `resilience_queue_wait_seconds_total`, a count of seconds with a fraction, is
    /// a gauge here (the facade's counters are integers). Each family is described
    /// (help text, and `Unit::Seconds` for that one) on every publish.
    ///
    /// A point that leaves the exported set (over the cap) keeps its last values in
    /// the recorder, since the facade has no way to remove a series.
    pub fn publish(&self) {
        metrics::with_recorder(|recorder| self.publish_to(recorder));
    }

    /// [`publish`](Self::publish) to the given recorder.
    pub fn publish_to(&self, recorder: &dyn Recorder) {
        // The facade sink never fails: the walk's only errors are a sink's.
        let _ = series::collect(self, &mut Facade { recorder });
    }

    /// Starts a thread (`resilience-metrics`) that publishes every `interval` (and
    /// once at once) to the global recorder, until the [`Publisher`] is stopped or
    /// dropped. Thread-local recorders do not reach it: install the recorder with
    /// `metrics::set_global_recorder` first.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero `interval` (it would publish without a pause), or
    /// the error of starting the thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use resilience_runtime::metrics::PointsCollector;
    /// use std::time::Duration;
    ///
    /// // After installing a recorder (metrics-exporter-prometheus, statsd, ...):
    /// let publisher = PointsCollector::global().spawn_publisher(Duration::from_secs(10))?;
    /// // ... serve ...
    /// publisher.stop().expect("the publisher thread panicked");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn_publisher(self, interval: Duration) -> std::io::Result<Publisher> {
        if interval.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the metrics publisher's interval is zero",
            ));
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("resilience-metrics".to_owned())
            .spawn(move || loop {
                self.publish();
                match stopped.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    // A stop message, or the publisher dropped.
                    Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            })?;
        Ok(Publisher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// A thread publishing a [`PointsCollector`] to the global `metrics` recorder at a
/// fixed interval ([`PointsCollector::spawn_publisher`]). Stopped by
/// [`stop`](Publisher::stop) or when dropped (which waits for a publish under way).
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
#[derive(Debug)]
pub struct Publisher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Publisher {
    /// Stops the thread and waits for it: no publish happens once this returns.
    ///
    /// # Errors
    ///
    /// The panic of the thread, if a publish panicked (a recorder that panics).
    pub fn stop(mut self) -> std::thread::Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> std::thread::Result<()> {
        drop(self.stop.take());
        match self.thread.take() {
            Some(thread) => thread.join(),
            None => Ok(()),
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // A panicked thread was reported by `stop` if the owner asked; a drop has
        // nobody to tell.
        let _ = self.halt();
    }
}

/// The walk's families set on a recorder.
struct Facade<'r> {
    recorder: &'r dyn Recorder,
}

impl Sink for Facade<'_> {
    fn family(
        &mut self,
        family: &Family,
        samples: &mut dyn FnMut(&mut Emit<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let name = KeyName::from(family.sample_name());
        let help = SharedString::const_str(family.help);
        match family.kind {
            Kind::Counter => self.recorder.describe_counter(name.clone(), None, help),
            Kind::Seconds => {
                self.recorder
                    .describe_gauge(name.clone(), Some(Unit::Seconds), help);
            }
            Kind::Gauge => self.recorder.describe_gauge(name.clone(), None, help),
        }
        samples(&mut |labels, value| {
            let labels: Vec<Label> = labels
                .iter()
                .map(|&(k, v)| Label::new(k, v.to_owned()))
                .collect();
            let key = Key::from_parts(name.clone(), labels);
            match family.kind {
                Kind::Counter => self
                    .recorder
                    .register_counter(&key, &METADATA)
                    .absolute(value.as_u64()),
                Kind::Seconds | Kind::Gauge => self
                    .recorder
                    .register_gauge(&key, &METADATA)
                    .set(value.as_f64()),
            }
            Ok(())
        })
    }
}
