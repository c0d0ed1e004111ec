//! `metrics-util`'s debugging recorder as the exporter tests read it: every series of
//! a snapshot by name and labels (in their published order).

// Each test binary uses some of these.
#![allow(dead_code)]

use metrics_util::debugging::{DebugValue, Snapshotter};
use metrics_util::MetricKind;
use std::collections::BTreeMap;

/// One published series: its name and labels (in their order).
pub(crate) type Series = (String, Vec<(String, String)>);

/// Every series of a snapshot, with its kind, unit and value.
pub(crate) fn read(
    snapshotter: &Snapshotter,
) -> BTreeMap<Series, (MetricKind, Option<String>, DebugValue)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, _help, value)| {
            let (kind, key) = key.into_parts();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let unit = unit.map(|u| u.as_str().to_owned());
            ((key.name().to_owned(), labels), (kind, unit, value))
        })
        .collect()
}

pub(crate) fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    (name.to_owned(), labels)
}
