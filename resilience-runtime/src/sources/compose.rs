//! The pure composition of a point's layers into its effective settings.

use super::{EffectivePolicy, Origin, Precedence, Section, SourceLayer};
use crate::Policy;

/// Composes layers: each section comes from the highest-ranked layer (by `precedence`)
/// that sets it; a section no layer sets keeps its default. The policy is `None` if no
/// layer sets any policy section.
pub(crate) fn compose(layers: &[SourceLayer], precedence: &Precedence) -> EffectivePolicy {
    let mut policy = Policy::observe();
    let mut any_policy = false;
    let mut breaker = None;
    let mut retry = None;
    let mut origins: [Option<Origin>; Section::ALL.len()] = Default::default();
    for section in Section::ALL {
        let winner = layers
            .iter()
            .filter(|l| l.settings.sets(section))
            .max_by(|a, b| precedence.compare(section, &a.source, &b.source));
        let Some(layer) = winner else { continue };
        origins[section as usize] = Some(Origin {
            source: layer.source.clone(),
            version: layer.version,
        });
        match section {
            Section::Breaker => breaker = layer.settings.breaker,
            Section::Retry => retry = layer.settings.retry,
            _ => {
                policy.take_section(&layer.settings.policy, section);
                any_policy = true;
            }
        }
    }
    EffectivePolicy::new(any_policy.then_some(policy), breaker, retry, origins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{PointConfig, Sections, Source, SourceKind};
    use crate::BreakerPolicy;
    use std::time::Duration;

    fn layer(source: Source, config: PointConfig) -> SourceLayer {
        SourceLayer {
            source,
            version: 1,
            settings: config,
        }
    }

    #[test]
    fn sections_come_from_their_own_winners() {
        let file = Policy::builder()
            .max_visits(5)
            .window(4, Duration::from_millis(250))
            .build()
            .unwrap();
        let console = Policy::builder().max_visits(9).build().unwrap();
        let layers = [
            layer(
                Source::file("a.toml"),
                PointConfig::builder()
                    .policy(file)
                    .breaker(BreakerPolicy::default())
                    .build(),
            ),
            layer(
                Source::Console,
                PointConfig::builder().policy(console).build(),
            ),
        ];
        let e = compose(&layers, &Precedence::default());
        let p = e.policy.clone().unwrap();
        assert_eq!(p.max_visits(), Some(9), "console wins the rules");
        assert_eq!(p.window().buckets, 4, "the file's window stays");
        assert_eq!(e.breaker, Some(BreakerPolicy::default()));
        assert_eq!(e.origin(Section::Rules).unwrap().source, Source::Console);
        assert_eq!(
            e.origin(Section::Window).unwrap().source,
            Source::file("a.toml")
        );
        assert_eq!(e.origin(Section::Adaptive), None);

        let code_first = Precedence::builder()
            .all([SourceKind::Code, SourceKind::File, SourceKind::Console])
            .build()
            .unwrap();
        let e = compose(&layers, &code_first);
        assert_eq!(e.policy.unwrap().max_visits(), Some(5));
    }

    #[test]
    fn later_file_names_win_and_nothing_set_means_no_policy() {
        let a = PointConfig::builder()
            .policy(Policy::builder().max_visits(1).build().unwrap())
            .build();
        let b = PointConfig::builder()
            .policy(Policy::builder().max_visits(2).build().unwrap())
            .build();
        let layers = [
            layer(Source::file("20-incident.toml"), b),
            layer(Source::file("10-base.toml"), a),
        ];
        let e = compose(&layers, &Precedence::default());
        assert_eq!(e.policy.unwrap().max_visits(), Some(2));
        let only_breaker = [layer(
            Source::Code,
            PointConfig::builder()
                .breaker(BreakerPolicy::Disabled)
                .build(),
        )];
        let e = compose(&only_breaker, &Precedence::default());
        assert_eq!((e.policy, e.breaker), (None, Some(BreakerPolicy::Disabled)));
        assert_eq!(
            compose(&[], &Precedence::default()),
            EffectivePolicy::default()
        );
        let nothing = PointConfig::builder()
            .policy(Policy::observe())
            .sections(Sections::NONE)
            .build();
        assert!(nothing.is_empty());
    }

    #[test]
    fn the_retry_section_is_layered_on_its_own() {
        use crate::retry::{Retry, RetryPolicy};
        let code = PointConfig::builder()
            .policy(Policy::builder().max_visits(3).build().unwrap())
            .retry(RetryPolicy::new(Retry::new(2)))
            .build();
        let console = PointConfig::builder()
            .retry(RetryPolicy::new(Retry::new(5)))
            .build();
        let layers = [
            layer(Source::Code, code.clone()),
            layer(Source::Console, console),
        ];
        let e = compose(&layers, &Precedence::default());
        assert_eq!(
            e.retry.map(|r| r.retry.attempts),
            Some(5),
            "the console wins"
        );
        assert_eq!(e.origin(Section::Retry).unwrap().source, Source::Console);
        assert_eq!(
            e.policy.unwrap().max_visits(),
            Some(3),
            "a retry-only layer leaves the rules to the code"
        );
        // Retry alone sets no policy section: the point keeps its fast path.
        let e = compose(&layers[1..], &Precedence::default());
        assert!(e.policy.is_none() && e.retry.is_some());
        assert!(!PointConfig::builder()
            .retry(RetryPolicy::new(Retry::new(2)))
            .build()
            .is_empty());
    }
}
