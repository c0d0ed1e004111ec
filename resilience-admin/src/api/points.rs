//! `GET .../points`: the point list of an app, built for apps of ten thousand points
//! (one read of the points with their latest cycles, beside one of the rest; the
//! answer written straight into a buffer of about its size).

use super::admin::{app_key, console_view, last_closed_cycle, stored_document, IDLE_CYCLES};
use super::{require, AdminState, ApiError};
use crate::auth::Right;
use crate::enforcement::{self, PointEnforcement};
use crate::fleet::{self, FleetCount};
use crate::model::{
    EnforcementRow, HotKey, HotKeysRow, InstanceInfo, KeyTableCounts, PointInfo, PointKeys,
    CYCLE_MS,
};
use crate::policy::Document;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::collections::HashMap;

/// About how many bytes a point takes in the answer (a point with a cycle, no
/// enforcement: some 660), to size its buffer once.
const BYTES_PER_POINT: usize = 768;

/// A point as the points list shows it.
#[derive(Debug, Serialize)]
struct PointView<'a> {
    #[serde(flatten)]
    info: &'a PointInfo,
    #[serde(flatten)]
    enforcement: PointEnforcement,
    /// No traffic in the last [`IDLE_CYCLES`] closed cycles (or none stored).
    idle: bool,
    /// The end of its last cycle with traffic, when idle; `None` if none is stored.
    idle_since_ms: Option<i64>,
    /// Its hottest keys: the current report of each live instance (see
    /// [`Store::hot_keys`](crate::store::Store::hot_keys)), merged (each key's passes
    /// and refusals summed), the hottest ten; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hot_keys: Vec<HotKey>,
    /// Its key table's totals, summed over the same reports; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_table: Option<KeyTableCounts>,
    /// The newest cycle of those reports, and how many instances sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    hot_keys_cycle_start_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hot_keys_instances: Option<u64>,
    /// Its classic breakers across the fleet, as the last pulls reported them (see
    /// [`crate::fleet`]); absent when no fresh instance has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetCount>,
}

/// The body of `GET .../points`.
#[derive(Debug, Serialize)]
struct PointsResponse<'a> {
    points: Vec<PointView<'a>>,
    now_ms: i64,
    cycle_start_ms: i64,
    cycle_ms: i64,
    policy_version: u64,
}

/// `GET .../points`: points reported by instances, points with a policy, and points
/// an instance enforces something for, each with its latest cycle, who enforces a
/// policy for it from which sources, drift, breaker states, its current hot keys,
/// and whether it is idle.
pub(super) async fn points(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    // The point list is the longest read: it runs beside the others (on a database
    // connection of its own), not before them.
    let key = app.clone();
    let list = state.store_op(move |s| s.points(&key));
    let key = app.clone();
    let at = state.now_ms();
    let others = state.store_op(move |s| {
        let current = match s.current_version(&key)? {
            0 => None,
            v => s.policy_version(&key, v)?,
        };
        Ok((
            s.enforcement(&key, None, false)?,
            s.instances(&key)?,
            s.hot_keys(&key)?,
            current,
            fleet::count(&s.breaker_reports(&key, fleet::oldest_fresh(at))?, at),
        ))
    });
    let (mut points, (rows, instances, hot, version, mut fleet)) = tokio::try_join!(list, others)?;
    let doc = match &version {
        None => Document::empty(),
        Some(v) => stored_document(v)?,
    };
    let current_version = version.as_ref().map_or(0, |v| v.version);
    let now = state.now_ms();
    let instances: HashMap<&str, &InstanceInfo> =
        instances.iter().map(|i| (i.instance.as_str(), i)).collect();
    let is_live = |instance: &str| enforcement::is_live(instances.get(instance).copied(), now);
    let mut live: HashMap<&str, Vec<&EnforcementRow>> = HashMap::new();
    for r in rows.iter().filter(|r| is_live(&r.instance)) {
        live.entry(r.entry.point.as_str()).or_default().push(r);
    }
    let mut live_keys: HashMap<&str, Vec<&HotKeysRow>> = HashMap::new();
    for r in hot.iter().filter(|r| is_live(&r.instance)) {
        live_keys.entry(r.point.as_str()).or_default().push(r);
    }
    let console = console_view(
        &state,
        &app,
        current_version,
        &doc,
        live.values()
            .flatten()
            .filter_map(|r| enforcement::console_version(&r.entry)),
    )
    .await?;
    let with_policy = doc.point_names();
    // The store's list is sorted (by the database's collation: sorted again by
    // bytes, which takes one pass when they agree); the points only a policy or an
    // enforcement report names are added in their place.
    let by_name = |a: &PointInfo, b: &PointInfo| a.name.cmp(&b.name);
    points.sort_by(by_name);
    let mut missing: Vec<&str> = with_policy
        .iter()
        .map(String::as_str)
        .chain(live.keys().copied())
        .filter(|name| {
            points
                .binary_search_by(|p| p.name.as_str().cmp(name))
                .is_err()
        })
        .collect();
    if !missing.is_empty() {
        missing.sort_unstable();
        missing.dedup();
        points.extend(missing.into_iter().map(|name| PointInfo {
            name: name.to_owned(),
            declared: false,
            has_policy: false,
            first_seen_ms: None,
            last_seen_ms: None,
            last_cycle: None,
        }));
        points.sort_by(by_name);
    }
    for p in &mut points {
        p.has_policy = with_policy.contains(&p.name);
    }
    let latest = last_closed_cycle(now);
    let views: Vec<PointView<'_>> = points
        .iter()
        .map(|info| {
            let last_traffic = info.last_cycle.as_ref().map(|c| c.cycle_start_ms);
            let idle = last_traffic.is_none_or(|t| latest - t > IDLE_CYCLES * CYCLE_MS);
            let enforcement = enforcement::summarize(
                live.get(info.name.as_str()).into_iter().flatten().copied(),
                &console,
            );
            let reports = live_keys.get(info.name.as_str());
            let keys = reports.map(|r| PointKeys::merged(r.iter().map(|r| &r.keys)));
            PointView {
                info,
                enforcement,
                idle,
                idle_since_ms: last_traffic.filter(|_| idle).map(|t| t + CYCLE_MS),
                hot_keys_cycle_start_ms: reports
                    .and_then(|r| r.iter().map(|r| r.cycle_start_ms).max()),
                hot_keys_instances: reports.map(|r| r.len() as u64),
                key_table: keys.as_ref().and_then(|k| k.key_table),
                hot_keys: keys.map_or_else(Vec::new, |k| k.hot_keys),
                fleet: fleet.remove(info.name.as_str()),
            }
        })
        .collect();
    let answer = PointsResponse {
        points: views,
        now_ms: now,
        cycle_start_ms: latest,
        cycle_ms: CYCLE_MS,
        policy_version: current_version,
    };
    // Serialised straight into one buffer of about the right size: no intermediate
    // JSON tree of 10 000 points, no copy each time a growing buffer doubles.
    let mut body = Vec::with_capacity(answer.points.len() * BYTES_PER_POINT + 256);
    serde_json::to_writer(&mut body, &answer)
        .map_err(|e| ApiError::internal(format!("cannot write the point list: {e}")))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}
