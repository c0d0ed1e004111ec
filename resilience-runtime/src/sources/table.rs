//! The registry's table of layers: per point, one layer per source. Pure bookkeeping;
//! the registry installs what it returns. A point's effective settings are always the
//! composition of its layers under the precedence, so they are composed when asked
//! for, not stored beside the layers (a copy of every policy per point).

use super::compose::compose;
use super::{EffectivePolicy, PointConfig, Precedence, Source, SourceLayer};
use std::collections::{BTreeSet, HashMap};

/// The layers of every point that has any, and every source's version.
///
/// Layers are held at their exact count: most points have one or two.
#[derive(Debug, Default)]
pub(crate) struct Table {
    precedence: Precedence,
    points: HashMap<&'static str, Vec<SourceLayer>>,
    versions: HashMap<Source, u64>,
    by_source: HashMap<Source, BTreeSet<&'static str>>,
}

/// The effective settings of a point before and after an update that changed them.
pub(crate) type Changed = (EffectivePolicy, EffectivePolicy);

impl Table {
    pub(crate) fn precedence(&self) -> Precedence {
        self.precedence
    }

    /// Sets the precedence; returns the points whose effective settings changed.
    pub(crate) fn set_precedence(
        &mut self,
        precedence: Precedence,
    ) -> Vec<(&'static str, Changed)> {
        let old = std::mem::replace(&mut self.precedence, precedence);
        let mut changed = Vec::new();
        for (&name, layers) in &self.points {
            let before = compose(layers, &old);
            let after = compose(layers, &precedence);
            if after != before {
                changed.push((name, (before, after)));
            }
        }
        changed
    }

    /// The version of a source's last update (0 if none).
    pub(crate) fn version(&self, source: &Source) -> u64 {
        self.versions.get(source).copied().unwrap_or(0)
    }

    /// Every source's version, sorted by source.
    pub(crate) fn versions(&self) -> Vec<(Source, u64)> {
        let mut v: Vec<_> = self.versions.iter().map(|(s, v)| (s.clone(), *v)).collect();
        v.sort();
        v
    }

    /// Records a new version of a source: `Some(v)` as given, `None` as the next one.
    pub(crate) fn bump(&mut self, source: &Source, version: Option<u64>) -> u64 {
        let v = self.versions.entry(source.clone()).or_insert(0);
        *v = version.unwrap_or(*v + 1);
        *v
    }

    /// The points a source has a layer for, sorted.
    pub(crate) fn points_of(&self, source: &Source) -> Vec<&'static str> {
        self.by_source
            .get(source)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// A point's layers, sorted by source.
    pub(crate) fn layers(&self, point: &str) -> Vec<SourceLayer> {
        let mut layers = self.points.get(point).cloned().unwrap_or_default();
        layers.sort_by(|a, b| a.source.cmp(&b.source));
        layers
    }

    /// The sources that have a layer of a point, sorted.
    pub(crate) fn sources(&self, point: &str) -> Vec<Source> {
        let mut sources: Vec<Source> = self
            .points
            .get(point)
            .map(|ls| ls.iter().map(|l| l.source.clone()).collect())
            .unwrap_or_default();
        sources.sort();
        sources
    }

    /// A source's layer of a point.
    pub(crate) fn layer(&self, point: &str, source: &Source) -> Option<&SourceLayer> {
        self.points.get(point)?.iter().find(|l| l.source == *source)
    }

    /// A point's effective settings: its layers composed.
    pub(crate) fn effective(&self, point: &str) -> EffectivePolicy {
        compose(
            self.points.get(point).map_or(&[], Vec::as_slice),
            &self.precedence,
        )
    }

    /// Replaces (`Some`) or removes (`None`, or settings that set nothing) a source's
    /// layer of a point; returns the effective settings before and after if they
    /// changed. Other sources' layers are never touched.
    pub(crate) fn set(
        &mut self,
        point: &'static str,
        source: &Source,
        settings: Option<PointConfig>,
        version: u64,
    ) -> Option<Changed> {
        let settings = settings.filter(|s| !s.is_empty());
        let layers = self.points.entry(point).or_default();
        let before = compose(layers, &self.precedence);
        layers.retain(|l| l.source != *source);
        let members = self.by_source.entry(source.clone()).or_default();
        match settings {
            Some(settings) => {
                // Most points have one or two layers: no spare room for four.
                layers.reserve_exact(1);
                layers.push(SourceLayer {
                    source: source.clone(),
                    version,
                    settings,
                });
                members.insert(point);
            }
            None => {
                members.remove(point);
            }
        }
        let after = compose(layers, &self.precedence);
        if layers.is_empty() {
            self.points.remove(point);
        } else {
            layers.shrink_to_fit();
        }
        (after != before).then_some((before, after))
    }
}
