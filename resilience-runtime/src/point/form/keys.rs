//! The point's forms of the `keys` section (cold) and the key's step of admission
//! (hot): see [`crate::keys`].

use crate::keys::{
    admit_key, KeyHold, KeyPolicy, KeyTable, KeyText, OverrideCell, OverrideIndex, Refusal, Rule,
};
pub(crate) use crate::keys::{KeyArg, WaitingKey};
#[cfg(feature = "redis")]
use crate::point::form::key_leases::{KeyLeases, LeaseRule};
use crate::sync::OnceLock;
use std::collections::BTreeMap;

/// The table of one `max_keys`, made on the first call with a key.
#[derive(Debug)]
pub(in crate::point) struct TableSlot {
    max_keys: u64,
    table: OnceLock<KeyTable>,
}

impl TableSlot {
    fn get(&self) -> &KeyTable {
        self.table.get_or_init(|| KeyTable::new(self.max_keys))
    }

    /// The table if a keyed call made it (statistics never make one).
    pub(in crate::point) fn made(&self) -> Option<&KeyTable> {
        self.table.get()
    }
}

/// A `keys` section compiled for the hot path, leaked like every slot.
#[derive(Debug)]
pub(in crate::point) struct KeyForm {
    policy: KeyPolicy,
    rule: Rule,
    table: &'static TableSlot,
    /// Overridden values by fingerprint.
    index: OverrideIndex,
    overrides: Box<[Override]>,
    /// The keys' leases and the section's own bucket, with a cluster setting.
    #[cfg(feature = "redis")]
    cluster: Option<(&'static KeyLeases, Option<LeaseRule>)>,
}

/// One overridden value of a form.
#[derive(Debug)]
struct Override {
    cell: &'static OverrideCell,
    rule: Rule,
    /// Its bucket in Redis, with a cluster setting and a limit.
    #[cfg(feature = "redis")]
    lease: Option<LeaseRule>,
}

impl KeyForm {
    #[inline]
    fn override_of(&self, fp: u64) -> Option<&Override> {
        self.overrides.get(self.index.get(fp)?)
    }

    /// The hold a call of key `fp` took under this form, from the parts its permit
    /// kept ([`KeyHold::into_parts`]): the form is immutable, so the key's override
    /// (code 0) or table is the one [`admit`](Self::admit) found. `None` never happens
    /// (a hold's table or override is there as long as its form).
    pub(in crate::point) fn hold(&'static self, fp: u64, code: u32) -> Option<KeyHold<'static>> {
        match code {
            0 => self
                .override_of(fp)
                .map(|o| KeyHold::in_override(o.cell, fp)),
            _ => Some(KeyHold::in_table_code(self.table.made()?, fp, code)),
        }
    }

    /// The key's step at `now`: its slot, if its rule counts calls in flight, or
    /// [`Refusal::Wait`] (with `may_wait` and the section's `max_wait`: the key's
    /// next token is reserved, the call comes back after that wait with `held`).
    #[inline]
    pub(in crate::point) fn admit(
        &self,
        key: &KeyArg<'_>,
        now: u64,
        held: bool,
        may_wait: bool,
    ) -> Result<Option<KeyHold<'static>>, Refusal> {
        let ask = |r: &Rule| Rule {
            max_wait: if may_wait { r.max_wait } else { 0 },
            held,
            ..*r
        };
        #[cfg(feature = "redis")]
        if let Some((leases, rule)) = self.cluster {
            return self.admit_cluster(leases, rule, key, now, ask);
        }
        let over = self.override_of(key.fp).map(|o| (o.cell, ask(&o.rule)));
        let text = key.text;
        admit_key(
            self.table.get(),
            over.as_ref().map(|(cell, rule)| (*cell, rule)),
            &ask(&self.rule),
            key.fp,
            now,
            || KeyText::of(text),
        )
    }

    /// [`admit`](Self::admit) with a cluster setting: a call the key's local rule
    /// admits also needs its bucket in Redis to (asked under the local rule's lock,
    /// so a refusal there takes nothing locally either).
    #[cfg(feature = "redis")]
    #[inline(never)]
    fn admit_cluster(
        &self,
        leases: &'static KeyLeases,
        rule: Option<LeaseRule>,
        key: &KeyArg<'_>,
        now: u64,
        ask_rule: impl Fn(&Rule) -> Rule,
    ) -> Result<Option<KeyHold<'static>>, Refusal> {
        let mut wake = None;
        let mut ask = |tracked: bool, r: Option<&LeaseRule>| match r {
            Some(r) => {
                let (admitted, w) = leases.admit(key.fp, key.text, r, tracked, now);
                wake = Some(w);
                admitted
            }
            None => true,
        };
        let decided = if let Some(o) = self.override_of(key.fp) {
            o.cell
                .admit_with(&ask_rule(&o.rule), now, || ask(true, o.lease.as_ref()))
                .map(|()| o.rule.holds().then(|| KeyHold::in_override(o.cell, key.fp)))
        } else {
            let table: &'static KeyTable = self.table.get();
            let text = key.text;
            table
                .admit_with(
                    key.fp,
                    &ask_rule(&self.rule),
                    now,
                    || KeyText::of(text),
                    |tracked| ask(tracked, rule.as_ref()),
                )
                .map(|place| place.map(|p| KeyHold::in_table(table, key.fp, p)))
        };
        // With no lock held.
        if let Some(w) = wake {
            leases.wake(w);
        }
        decided
    }
}

/// Every `keys` form, table and override cell a point has had (kept with the
/// point's settings, see `Settings`), boxed: most points never have a `keys` section.
#[derive(Debug, Default)]
pub(in crate::point) struct KeyForms(Option<Box<Held>>);

impl KeyForms {
    pub(in crate::point) const EMPTY: KeyForms = KeyForms(None);

    /// See [`Held::form_for`].
    pub(in crate::point) fn form_for(
        &mut self,
        p: &KeyPolicy,
        clock: &crate::Clock,
        owner: &crate::point::observe::chores::Owner,
    ) -> &'static KeyForm {
        self.0
            .get_or_insert_with(Box::default)
            .form_for(p, clock, owner)
    }

    pub(in crate::point) fn current_table(
        &self,
        p: Option<&KeyPolicy>,
    ) -> Option<&'static TableSlot> {
        self.0.as_ref()?.current_table(p)
    }

    #[cfg(feature = "redis")]
    pub(in crate::point) fn cluster_stats(
        &self,
        p: &KeyPolicy,
    ) -> Option<crate::keys::KeyClusterStats> {
        self.0.as_ref()?.cluster_stats(p)
    }

    /// The override cell of `value`, if a section ever overrode it.
    pub(in crate::point) fn cell(&self, value: &str) -> Option<&'static OverrideCell> {
        self.0.as_ref()?.cells.get(value).copied()
    }
}

/// What [`KeyForms`] holds once a point had a `keys` section.
#[derive(Debug, Default)]
struct Held {
    forms: Vec<&'static KeyForm>,
    tables: Vec<&'static TableSlot>,
    cells: BTreeMap<String, &'static OverrideCell>,
    /// Lease maps, one per cluster setting and `max_keys`.
    #[cfg(feature = "redis")]
    leases: Vec<&'static KeyLeases>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: forms, tables, cells and lease maps came from `Box::leak` in
        // `form_for`, are listed once, and go with their point (see `Settings`).
        unsafe {
            self.forms.drain(..).for_each(|f| crate::util::reclaim(f));
            self.tables.drain(..).for_each(|t| crate::util::reclaim(t));
            std::mem::take(&mut self.cells)
                .into_values()
                .for_each(|c| crate::util::reclaim(c));
            #[cfg(feature = "redis")]
            self.leases.drain(..).for_each(|l| {
                l.forget_chores();
                crate::util::reclaim(l)
            });
        }
    }
}

impl Held {
    /// The form of `p`: one made before for an equal section, else a new one sharing
    /// the table of its `max_keys`, the cells of the values it overrides and the
    /// lease map of its cluster setting and `max_keys` (so a policy change that keeps
    /// those keeps the keys' leases; a lease whose key's rule changed is started
    /// again). `clock` is the point's.
    fn form_for(
        &mut self,
        p: &KeyPolicy,
        _clock: &crate::Clock,
        _owner: &crate::point::observe::chores::Owner,
    ) -> &'static KeyForm {
        if let Some(f) = self.forms.iter().find(|f| f.policy == *p) {
            return f;
        }
        let table = match self.tables.iter().find(|t| t.max_keys == p.max_keys) {
            Some(t) => *t,
            None => {
                let t: &'static TableSlot = Box::leak(Box::new(TableSlot {
                    max_keys: p.max_keys,
                    table: OnceLock::new(),
                }));
                self.tables.push(t);
                t
            }
        };
        let mut overrides = Vec::with_capacity(p.overrides.len());
        for (value, o) in &p.overrides {
            let cell = *self
                .cells
                .entry(value.clone())
                .or_insert_with(|| Box::leak(Box::new(OverrideCell::new(value))));
            overrides.push(Override {
                cell,
                rule: p.compile(&p.merged(o)),
                #[cfg(feature = "redis")]
                lease: p
                    .cluster
                    .as_ref()
                    .and_then(|c| LeaseRule::of(p, &p.merged(o), c)),
            });
        }
        #[cfg(feature = "redis")]
        let cluster = p.cluster.as_ref().map(|c| {
            let leases = match self
                .leases
                .iter()
                .find(|l| l.cluster == *c && l.max_keys == p.max_keys)
            {
                Some(l) => *l,
                None => {
                    let l: &'static KeyLeases = Box::leak(Box::new(KeyLeases::new(
                        c,
                        p.max_keys,
                        _clock,
                        _owner.clone(),
                    )));
                    self.leases.push(l);
                    l
                }
            };
            (leases, LeaseRule::of(p, &p.rule, c))
        });
        let form: &'static KeyForm = Box::leak(Box::new(KeyForm {
            policy: p.clone(),
            rule: p.compile(&p.rule),
            table,
            index: OverrideIndex::of(p),
            overrides: overrides.into_boxed_slice(),
            #[cfg(feature = "redis")]
            cluster,
        }));
        self.forms.push(form);
        form
    }

    pub(in crate::point) fn current_table(
        &self,
        p: Option<&KeyPolicy>,
    ) -> Option<&'static TableSlot> {
        let p = p?;
        self.tables
            .iter()
            .find(|t| t.max_keys == p.max_keys)
            .copied()
    }

    /// The counts of the lease map `p` uses, if it has a cluster setting.
    #[cfg(feature = "redis")]
    pub(in crate::point) fn cluster_stats(
        &self,
        p: &KeyPolicy,
    ) -> Option<crate::keys::KeyClusterStats> {
        let c = p.cluster.as_ref()?;
        self.leases
            .iter()
            .find(|l| l.cluster == *c && l.max_keys == p.max_keys)
            .map(|l| l.stats())
    }
}
