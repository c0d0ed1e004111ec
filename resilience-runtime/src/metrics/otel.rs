//! The OpenTelemetry exporter (feature `opentelemetry`): one observable instrument per
//! family, whose callback reports the family's samples from the shared walk.
//!
//! The SDK calls each instrument's callback once per collection. The points are walked
//! once per collection, not once per instrument: the callbacks share the last walk,
//! and an instrument that already reported it starts a new one.

use super::series::{self, Emit, Family, Kind, Sink, Value};
use super::PointsCollector;
use crate::sync::Recover;
use opentelemetry::metrics::{Meter, ObservableCounter, ObservableGauge};
use opentelemetry::KeyValue;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The observable instruments [`PointsCollector::register_otel`] registered, one per
/// family. Dropping them unregisters nothing: their callbacks run as long as the
/// meter's provider does (the OpenTelemetry API has no way to remove them).
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub struct OtelInstruments {
    names: Vec<&'static str>,
    /// For the tests: the callbacks' shared state.
    #[cfg(test)]
    shared: Arc<Shared>,
    _counters: Vec<ObservableCounter<u64>>,
    _seconds: Vec<ObservableCounter<f64>>,
    _gauges: Vec<ObservableGauge<u64>>,
}

impl fmt::Debug for OtelInstruments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelInstruments")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl OtelInstruments {
    /// The instruments' names, in registration order (`resilience_visits`, ...).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// How many times the callbacks walked the points.
    #[cfg(test)]
    fn walks(&self) -> usize {
        self.shared.walks.load(Ordering::Relaxed)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
impl PointsCollector {
    /// Registers one observable instrument per family on `meter`, each reporting its
    /// family's series at every collection: counters as `u64` observable counters
    /// (`resilience_queue_wait_seconds` as an `f64` one, unit `s`), gauges as `u64`
    /// observable gauges, with the labels of the Prometheus exposition as attributes.
    ///
    /// Instruments are named after the Prometheus families without the `_total` of
    /// counters (`resilience_visits`, `resilience_downgrades`, ...): OpenTelemetry's
    /// Prometheus exporters add it back. Register once per meter: a second registration
    /// makes a second instrument of each name.
    ///
    /// The SDK caps the attribute sets of an instrument (2 000 by default, then an
    /// `otel.metric.overflow` series): `resilience_downgrades` has one per point and
    /// [`Reason`](crate::Reason), so keep [`max_points`](Self::max_points) times
    /// `Reason::ALL.len()` under the SDK's limit, or raise it with a view.
    ///
    /// # Examples
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider as _;
    /// use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    /// use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    /// use resilience_runtime::metrics::PointsCollector;
    /// use resilience_runtime::registry;
    ///
    /// registry().point("docs.otel")?.enter().unwrap().finish(false);
    ///
    /// let exporter = InMemoryMetricExporter::default();
    /// let provider = SdkMeterProvider::builder()
    ///     .with_reader(PeriodicReader::builder(exporter.clone()).build())
    ///     .build();
    /// PointsCollector::global().max_points(100).register_otel(&provider.meter("resilience"));
    /// provider.force_flush()?;
    ///
    /// let exported = exporter.get_finished_metrics()?;
    /// let visits = exported[0]
    ///     .scope_metrics()
    ///     .flat_map(|scope| scope.metrics())
    ///     .find(|m| m.name() == "resilience_visits")
    ///     .unwrap();
    /// let AggregatedMetrics::U64(MetricData::Sum(sum)) = visits.data() else { panic!() };
    /// let docs = sum
    ///     .data_points()
    ///     .find(|p| p.attributes().any(|a| a.value.as_str() == "docs.otel"))
    ///     .unwrap();
    /// assert_eq!(docs.value(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_otel(self, meter: &Meter) -> OtelInstruments {
        // The families (their samples are not taken); the walk never fails.
        let mut families = Families(Vec::new());
        let _ = series::collect(&self, &mut families);
        let families = families.0;
        let shared = Arc::new(Shared {
            source: self,
            walks: AtomicUsize::new(0),
            last: Mutex::new(Last {
                families: Snapshot::default(),
                // Nothing walked yet: the first callback walks the points.
                read: vec![true; families.len()],
            }),
        });
        let mut instruments = OtelInstruments {
            names: Vec::new(),
            #[cfg(test)]
            shared: Arc::clone(&shared),
            _counters: Vec::new(),
            _seconds: Vec::new(),
            _gauges: Vec::new(),
        };
        for (index, family) in families.into_iter().enumerate() {
            instruments.names.push(family.name);
            let shared = Arc::clone(&shared);
            match family.kind {
                Kind::Counter => instruments._counters.push(
                    meter
                        .u64_observable_counter(family.name)
                        .with_description(family.help)
                        .with_callback(move |o| {
                            shared.report(index, |v, a| o.observe(v.as_u64(), a))
                        })
                        .build(),
                ),
                Kind::Seconds => instruments._seconds.push(
                    meter
                        .f64_observable_counter(family.name)
                        .with_description(family.help)
                        .with_unit("s")
                        .with_callback(move |o| {
                            shared.report(index, |v, a| o.observe(v.as_f64(), a))
                        })
                        .build(),
                ),
                Kind::Gauge => instruments._gauges.push(
                    meter
                        .u64_observable_gauge(family.name)
                        .with_description(family.help)
                        .with_callback(move |o| {
                            shared.report(index, |v, a| o.observe(v.as_u64(), a))
                        })
                        .build(),
                ),
            }
        }
        instruments
    }
}

/// Every family of one walk, with its samples' attributes and values.
#[derive(Debug, Default)]
struct Snapshot(Vec<(Family, Samples)>);

/// A family's samples: attributes and value.
type Samples = Vec<(Vec<KeyValue>, Value)>;

impl Sink for Snapshot {
    fn family(
        &mut self,
        family: &Family,
        samples: &mut dyn FnMut(&mut Emit<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let mut taken = Vec::new();
        samples(&mut |labels, value| {
            let attributes = labels
                .iter()
                .map(|&(k, v)| KeyValue::new(k, v.to_owned()))
                .collect();
            taken.push((attributes, value));
            Ok(())
        })?;
        self.0.push((*family, taken));
        Ok(())
    }
}

/// The walk's families, without their samples.
struct Families(Vec<Family>);

impl Sink for Families {
    fn family(
        &mut self,
        family: &Family,
        _samples: &mut dyn FnMut(&mut Emit<'_>) -> fmt::Result,
    ) -> fmt::Result {
        self.0.push(*family);
        Ok(())
    }
}

/// What the callbacks of one registration share.
struct Shared {
    source: PointsCollector,
    /// Walks made by the callbacks.
    walks: AtomicUsize,
    last: Mutex<Last>,
}

/// The last walk, and which instruments reported it.
struct Last {
    families: Snapshot,
    read: Vec<bool>,
}

impl Shared {
    /// Hands each sample of family `index` to `observe`, from the last walk unless this
    /// instrument reported it already (then from a new one).
    fn report(&self, index: usize, mut observe: impl FnMut(Value, &[KeyValue])) {
        // A panic in another callback leaves the last walk whole: it is only replaced.
        let mut last = self.last.lock().recover();
        if last.read.get(index).copied().unwrap_or(true) {
            let mut families = Snapshot::default();
            let _ = series::collect(&self.source, &mut families);
            self.walks.fetch_add(1, Ordering::Relaxed);
            last.read = vec![false; families.0.len()];
            last.families = families;
        }
        if let Some(seen) = last.read.get_mut(index) {
            *seen = true;
        }
        if let Some((_, samples)) = last.families.0.get(index) {
            for (attributes, value) in samples {
                observe(*value, attributes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PointsCollector;
    use crate::{Clock, Registry};
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use std::time::Duration;

    /// Each collection walks the points once, whatever the number of instruments, and
    /// reports what the registry holds then; two readers make two collections.
    #[test]
    fn one_walk_per_collection() {
        let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        let exporters = [
            InMemoryMetricExporter::default(),
            InMemoryMetricExporter::default(),
        ];
        let reader = |e: &InMemoryMetricExporter| {
            PeriodicReader::builder(e.clone())
                .with_interval(Duration::from_secs(3600))
                .build()
        };
        let provider = SdkMeterProvider::builder()
            .with_reader(reader(&exporters[0]))
            .build();
        let instruments = PointsCollector::new(r).register_otel(&provider.meter("test"));
        assert!(instruments.names().len() > 20);
        assert_eq!(instruments.walks(), 0);
        for round in 1..=3u64 {
            r.point("walks").unwrap().enter().unwrap().finish(false);
            provider.force_flush().unwrap();
            assert_eq!(instruments.walks(), round as usize);
            let exported = exporters[0].get_finished_metrics().unwrap();
            let last = exported.last().unwrap();
            let visits = last
                .scope_metrics()
                .flat_map(|s| s.metrics())
                .find(|m| m.name() == "resilience_visits")
                .unwrap();
            let opentelemetry_sdk::metrics::data::AggregatedMetrics::U64(
                opentelemetry_sdk::metrics::data::MetricData::Sum(sum),
            ) = visits.data()
            else {
                panic!("{visits:?}");
            };
            let values: Vec<u64> = sum.data_points().map(|p| p.value()).collect();
            assert_eq!(values, [round]);
        }
        provider.shutdown().unwrap();

        let provider = SdkMeterProvider::builder()
            .with_reader(reader(&exporters[0]))
            .with_reader(reader(&exporters[1]))
            .build();
        let instruments = PointsCollector::new(r).register_otel(&provider.meter("test"));
        provider.force_flush().unwrap();
        assert_eq!(instruments.walks(), 2);
        provider.shutdown().unwrap();
    }
}
