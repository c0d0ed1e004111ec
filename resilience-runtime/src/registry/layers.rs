//! The registry's side of layers: edits go through one lock, and what they change in
//! the effective settings is installed in the point before the lock is released, so a
//! point always enforces the composition of its current layers.

use super::Registry;
use crate::error::{check_point_name, PointNameError};
use crate::listener::ListenerId;
use crate::point::Point;
use crate::policy::BreakerError;
use crate::sources::table::Table;
use crate::sources::{EffectivePolicy, PointConfig, PolicyChange, Precedence, Source, SourceLayer};
use crate::sync::Recover;
use crate::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

type PolicyListener = Arc<dyn Fn(&PolicyChange) + Send + Sync>;

/// The layers of a registry and the listeners of their changes.
pub(crate) struct Layers {
    table: Mutex<Table>,
    listeners: RwLock<Vec<(ListenerId, PolicyListener)>>,
}

impl fmt::Debug for Layers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layers").finish_non_exhaustive()
    }
}

impl Layers {
    pub(crate) fn new() -> Layers {
        Layers {
            table: Mutex::new(Table::default()),
            listeners: RwLock::new(Vec::new()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().recover()
    }

    pub(crate) fn remove_listener(&self, id: ListenerId) -> bool {
        let mut list = self.listeners.write().recover();
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        list.len() != before
    }

    fn notify(&self, changes: &[PolicyChange]) {
        for change in changes {
            #[cfg(feature = "tracing")]
            tracing::debug!(
                point = change.point,
                source = %change.source,
                provenance = %Provenance(&change.after),
                "effective policy changed"
            );
            let listeners = self.listeners.read().recover().clone();
            for (_, listener) in listeners {
                // A panicking listener must not poison the caller's edit.
                let _ = catch_unwind(AssertUnwindSafe(|| listener(change)));
            }
        }
    }
}

/// `rules=console@3 window=file:a.toml@2`, for logs.
#[cfg(feature = "tracing")]
struct Provenance<'a>(&'a EffectivePolicy);

#[cfg(feature = "tracing")]
impl fmt::Display for Provenance<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (section, origin) in self.0.origins() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{section}={}@{}", origin.source, origin.version)?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Installs a change of effective settings in the point: only what changed, so an
/// unchanged breaker keeps its state.
fn install(point: &Point, before: &EffectivePolicy, after: &EffectivePolicy) {
    if before.policy != after.policy {
        point.apply(after.policy.clone());
    }
    if before.breaker != after.breaker {
        point.apply_breaker(after.breaker);
    }
    if before.retry != after.retry {
        point.apply_retry(after.retry);
    }
}

impl Registry {
    /// The registry clock's wall time now.
    fn wall_time(&self) -> std::time::SystemTime {
        self.clock().system_time(self.clock().now())
    }

    /// Tells the policy listeners (at once, on this thread) and queues an
    /// [`Event::Policy`](crate::Event::Policy) per change for the event listeners.
    fn notify_policy_changes(&self, changes: &[PolicyChange]) {
        self.layers_state().notify(changes);
        self.emit_policy_events(changes);
    }

    /// Edits layers of one source under the layer lock. `edits` reads the table and
    /// returns the new layers (`None`: remove); the source's version is bumped first
    /// (`version`, or the next one). Returns the version.
    pub(crate) fn edit_layers<F>(&self, source: &Source, version: Option<u64>, edits: F) -> u64
    where
        F: FnOnce(&Table) -> Vec<(Arc<Point>, Option<PointConfig>)>,
    {
        let layers = self.layers_state();
        let mut changes = Vec::new();
        let version = {
            let mut table = layers.lock();
            let edits = edits(&table);
            let version = table.bump(source, version);
            for (point, settings) in edits {
                if let Some((before, after)) = table.set(point.name(), source, settings, version) {
                    install(&point, &before, &after);
                    changes.push(PolicyChange {
                        point: point.name(),
                        source: source.clone(),
                        before,
                        after,
                        time: self.wall_time(),
                    });
                }
            }
            version
        };
        self.notify_policy_changes(&changes);
        version
    }

    /// Edits the code layer of one point.
    pub(crate) fn edit_code_layer(
        &self,
        point: Arc<Point>,
        edit: impl FnOnce(Option<PointConfig>) -> Option<PointConfig>,
    ) {
        self.edit_layers(&Source::Code, None, |table| {
            let current = table
                .layer(point.name(), &Source::Code)
                .map(|l| l.settings.clone());
            vec![(point, edit(current))]
        });
    }

    /// Sets one source's layer of a point (creating the point if needed), replacing
    /// that source's previous layer of the point; other sources' layers are kept. The
    /// point then enforces the composition of its layers ([`layers`](crate::sources)).
    ///
    /// # Errors
    ///
    /// [`BreakerError`] for an invalid name, breaker setting or retry section (naming
    /// the field).
    pub fn set_layer(
        &self,
        name: &str,
        source: Source,
        settings: PointConfig,
    ) -> Result<(), BreakerError> {
        if let Some(b) = &settings.breaker {
            b.validate()?;
        }
        if let Some(r) = &settings.retry {
            r.validate().map_err(BreakerError::Retry)?;
        }
        let point = self.point_handle(name)?;
        self.edit_layers(&source, None, |_| vec![(point, Some(settings))]);
        Ok(())
    }

    /// Removes one source's layer of a point; the point falls back to its other layers.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn clear_layer(&self, name: &str, source: Source) -> Result<(), PointNameError> {
        check_point_name(name)?;
        if let Some(point) = self.find(name) {
            self.edit_layers(&source, None, |_| vec![(point, None)]);
        }
        Ok(())
    }

    /// What a point enforces and, per section, which source and version it came from.
    /// A point without layers gives the default (no policy, no breaker setting).
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn effective_policy(&self, name: &str) -> Result<EffectivePolicy, PointNameError> {
        check_point_name(name)?;
        Ok(self.layers_state().lock().effective(name))
    }

    /// Every layer of a point, sorted by source (code, files by name, console).
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn layers(&self, name: &str) -> Result<Vec<SourceLayer>, PointNameError> {
        check_point_name(name)?;
        Ok(self.layers_state().lock().layers(name))
    }

    /// The points a source has a layer for, sorted.
    pub fn points_of(&self, source: &Source) -> Vec<&'static str> {
        self.layers_state().lock().points_of(source)
    }

    /// The version of a source's last update: for a file, how many times it was
    /// applied; for the console, the version last pulled; 0 if never.
    pub fn source_version(&self, source: &Source) -> u64 {
        self.layers_state().lock().version(source)
    }

    /// Every source that has been applied, with its version, sorted by source.
    pub fn source_versions(&self) -> Vec<(Source, u64)> {
        self.layers_state().lock().versions()
    }

    /// The precedence in force ([`Precedence::default`] unless set).
    pub fn precedence(&self) -> Precedence {
        self.layers_state().lock().precedence()
    }

    /// Changes the precedence; every point whose effective settings change enforces
    /// the new composition before this returns.
    pub fn set_precedence(&self, precedence: Precedence) {
        let layers = self.layers_state();
        let mut changes = Vec::new();
        {
            let mut table = layers.lock();
            for (name, (before, after)) in table.set_precedence(precedence) {
                if let Some(point) = self.find(name) {
                    install(&point, &before, &after);
                    changes.push(PolicyChange {
                        point: name,
                        source: Source::Code,
                        before,
                        after,
                        time: self.wall_time(),
                    });
                }
            }
        }
        self.notify_policy_changes(&changes);
    }

    /// Adds a listener called on every change of a point's effective settings (a
    /// layer set or removed, a precedence change), after the change is enforced, on
    /// the thread that made it. A panicking listener is isolated. Remove it with
    /// [`remove_listener`](Registry::remove_listener).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::sources::Source;
    /// use resilience_runtime::{registry, Policy};
    /// use std::sync::{Arc, Mutex};
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let id = registry().add_policy_listener(move |c| {
    ///     log.lock().unwrap().push((c.point, c.source.clone()));
    /// });
    /// registry().set_policy("docs.policy_listener", Policy::observe())?;
    /// registry().remove_listener(id);
    /// assert!(seen.lock().unwrap().contains(&("docs.policy_listener", Source::Code)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_policy_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&PolicyChange) + Send + Sync + 'static,
    {
        let id = ListenerId::fresh();
        self.layers_state()
            .listeners
            .write()
            .recover()
            .push((id, Arc::new(f)));
        id
    }
}
