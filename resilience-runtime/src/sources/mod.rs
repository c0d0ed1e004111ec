//! Layered policy sources with provenance.
//!
//! A point's settings come from named [`Source`]s: the program ([`Source::Code`]:
//! [`Registry::set_policy`](crate::Registry::set_policy),
//! [`Registry::set_breaker`](crate::Registry::set_breaker)), one or more policy files
//! ([`Source::File`], by path), and the admin console ([`Source::Console`], applied by
//! the heartbeat client). Each source owns one [`SourceLayer`] per point, and applying a
//! source replaces only its own layers: a console pull that does not mention a point
//! never clears what a file set for it, and a reloaded file never touches what the
//! console set.
//!
//! The settings enforced (the [`EffectivePolicy`]) are composed per [`Section`]
//! (rules, window, shadow, adaptive, cluster, breaker, retry, keys): each section comes
//! from the highest-ranked layer that sets it, by a [`Precedence`] (default: console
//! over file over code, for every section; between two files the name that sorts last
//! wins).
//! [`Registry::effective_policy`](crate::Registry::effective_policy) says, per section,
//! which source and version it came from; [`Registry::layers`](crate::Registry::layers)
//! returns every layer; [`Registry::add_policy_listener`](crate::Registry::add_policy_listener)
//! sees every change of what is effective (and the `tracing` feature logs it).
//!
//! What a layer sets: `set_policy` sets the rules and every section of the policy that
//! differs from its default ([`PointConfigBuilder::policy`]); `set_breaker` sets the breaker. A
//! point table of a policy file sets the sections it mentions: the rules if it has any
//! rule key (or no key at all), `window`, `shadow`, `adaptive`, `cluster` and `keys` if
//! present (`adaptive = "off"` sets "no adaptive limit" over lower layers, `keys = "off"`
//! "no per-key limits"), and the breaker if it has a `breaker` table.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::sources::{PointConfig, Section, Source};
//! use resilience_runtime::{Clock, Policy, Registry, WindowConfig};
//! use std::time::Duration;
//!
//! let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
//! // The program's default.
//! registry.set_policy("api", Policy::builder().max_visits(100).build()?)?;
//! // A file sets a tighter limit and its own window.
//! let file = Policy::builder().max_visits(50).window(5, Duration::from_millis(200)).build()?;
//! let window = file.window();
//! registry.set_layer("api", Source::file("policies.toml"), PointConfig::builder().policy(file).build())?;
//! // The console sets only the rules.
//! let console = Policy::builder().max_visits(10).build()?;
//! registry.set_layer("api", Source::Console, PointConfig::builder().policy(console).build())?;
//!
//! let e = registry.effective_policy("api")?;
//! assert_eq!(e.policy.as_ref().unwrap().max_visits(), Some(10));
//! assert_eq!(e.policy.as_ref().unwrap().window(), window, "the file's window stays");
//! assert_eq!(e.origin(Section::Rules).unwrap().source, Source::Console);
//! assert_eq!(e.origin(Section::Window).unwrap().source, Source::file("policies.toml"));
//! assert_eq!(registry.layers("api")?.len(), 3);
//!
//! // Removing the console's layer leaves the file's, not nothing.
//! registry.clear_layer("api", Source::Console)?;
//! assert_eq!(registry.policy("api")?.unwrap().max_visits(), Some(50));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compose;
mod section;
mod settings;
mod source;
pub(crate) mod table;

pub use section::{Section, Sections};
pub use settings::{
    EffectivePolicy, Origin, PointConfig, PointConfigBuilder, PolicyChange, SourceLayer,
};
pub use source::{Precedence, PrecedenceBuilder, PrecedenceError, Source, SourceKind};
