//! Reports the problems of one point: [`Reporter`] (typed reads of fields that
//! report what is wrong with them) and the "did you mean" of unknown names. Every
//! section's check (`check`, `sections`, `keys`, `retry`) reports through it.

use super::duration::parse_duration;
use super::error::{Problem, ProblemKind};
use super::node::Node;
use std::time::Duration;

/// Reports problems against one point.
pub(super) struct Reporter<'a> {
    point: &'a str,
    problems: &'a mut Vec<Problem>,
    failed: bool,
    /// Whether sections this build cannot enforce are read and checked (a fleet's
    /// document) rather than refused.
    every_feature: bool,
}

impl<'a> Reporter<'a> {
    /// A reporter of the problems of `point` into `problems`.
    pub(super) fn new(
        point: &'a str,
        problems: &'a mut Vec<Problem>,
        every_feature: bool,
    ) -> Reporter<'a> {
        Reporter {
            point,
            problems,
            failed: false,
            every_feature,
        }
    }

    /// Whether a section that needs `redis` is read here: with the feature, or for a
    /// fleet's document; otherwise it is refused with a problem naming the feature.
    pub(super) fn reads_redis_sections(&self) -> bool {
        cfg!(feature = "redis") || self.every_feature
    }

    /// Whether any problem was reported.
    pub(super) fn failed(&self) -> bool {
        self.failed
    }
}

impl Reporter<'_> {
    pub(super) fn push(&mut self, field: &str, kind: ProblemKind, message: String) {
        self.failed = true;
        self.problems
            .push(Problem::new(Some(self.point), Some(field), kind, message));
    }

    pub(super) fn wrong_type(&mut self, field: &str, expected: &str, got: &Node) {
        self.push(
            field,
            ProblemKind::WrongType,
            format!("expected {expected}, got {}", got.describe()),
        );
    }

    /// How many problems are reported so far.
    pub(super) fn count(&self) -> usize {
        self.problems.len()
    }

    /// Splits a section's table into its known fields, reporting unknown and
    /// duplicate keys; `None` (reported) if the value is not a table.
    pub(super) fn section<'n, const N: usize>(
        &mut self,
        section: &str,
        value: &'n Node,
        known: [&str; N],
    ) -> Option<[Option<&'n Node>; N]> {
        let Node::Map(entries) = value else {
            let keys = known.join(", ");
            self.wrong_type(section, &format!("a table with {keys}"), value);
            return None;
        };
        let mut found = [None; N];
        for (key, v) in entries {
            let field = format!("{section}.{key}");
            match known.iter().position(|k| k == key) {
                Some(i) if found[i].is_some() => self.push(
                    &field,
                    ProblemKind::DuplicateField,
                    format!("`{field}` is given twice"),
                ),
                Some(i) => found[i] = Some(v),
                None => {
                    let message = unknown_key_message(key, &known);
                    self.push(&field, ProblemKind::UnknownField, message);
                }
            }
        }
        Some(found)
    }

    /// A required field of a section, reported if missing.
    pub(super) fn required<'n>(
        &mut self,
        field: &str,
        value: Option<&'n Node>,
    ) -> Option<&'n Node> {
        if value.is_none() {
            self.push(
                field,
                ProblemKind::MissingField,
                format!("`{field}` is required"),
            );
        }
        value
    }

    fn integer(&mut self, field: &str, value: &Node, max: u64) -> Option<u64> {
        match value {
            Node::Int(i) if *i < 0 => {
                self.push(
                    field,
                    ProblemKind::OutOfRange,
                    format!("must be at least 0, got {i}"),
                );
                None
            }
            Node::Int(i) => match u64::try_from(*i) {
                Ok(v) if v <= max => Some(v),
                _ => {
                    self.push(
                        field,
                        ProblemKind::OutOfRange,
                        format!("must be at most {max}, got {i}"),
                    );
                    None
                }
            },
            other => {
                self.wrong_type(field, "a non-negative integer", other);
                None
            }
        }
    }

    pub(super) fn u64(&mut self, field: &str, value: &Node) -> Option<u64> {
        self.integer(field, value, u64::MAX)
    }

    pub(super) fn number(&mut self, field: &str, value: &Node) -> Option<f64> {
        match value {
            Node::Float(x) => Some(*x),
            // Precision loss above 2^53 is fine: every rate field is range-checked far
            // below that by the policy's own validation.
            #[allow(clippy::cast_precision_loss)]
            Node::Int(i) => Some(*i as f64),
            other => {
                self.wrong_type(field, "a number", other);
                None
            }
        }
    }

    pub(super) fn bool(&mut self, field: &str, value: &Node) -> Option<bool> {
        match value {
            Node::Bool(b) => Some(*b),
            other => {
                self.wrong_type(field, "a boolean", other);
                None
            }
        }
    }

    pub(super) fn string(&mut self, field: &str, value: &Node) -> Option<String> {
        match value {
            Node::Str(text) => Some(text.clone()),
            other => {
                self.wrong_type(field, "a string", other);
                None
            }
        }
    }

    pub(super) fn duration(&mut self, field: &str, value: &Node) -> Option<Duration> {
        match value {
            Node::Str(text) => match parse_duration(text) {
                Ok(d) => Some(d),
                Err(e) => {
                    let kind = if e.too_large {
                        ProblemKind::OutOfRange
                    } else {
                        ProblemKind::WrongType
                    };
                    self.push(field, kind, e.message);
                    None
                }
            },
            other => {
                self.wrong_type(
                    field,
                    "a duration string such as \"250ms\" or \"10s\"",
                    other,
                );
                None
            }
        }
    }
}

impl Reporter<'_> {
    pub(super) fn push_point(&mut self, value: &Node) {
        self.failed = true;
        self.problems.push(Problem::new(
            Some(self.point),
            None,
            ProblemKind::WrongType,
            format!("expected a table of settings, got {}", value.describe()),
        ));
    }
}

/// "unknown field `max_visit`, did you mean `max_visits`? expected one of ...".
pub(super) fn unknown_key_message(key: &str, known: &[&str]) -> String {
    unknown_name_message("field", key, known)
}

/// "unknown `what` `key`, did you mean ...? (expected one of ...)".
pub(super) fn unknown_name_message(what: &str, key: &str, known: &[&str]) -> String {
    let list = known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let suggestion = known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min();
    match suggestion {
        Some((_, k)) => {
            format!("unknown {what} `{key}`, did you mean `{k}`? (expected one of {list})")
        }
        None => format!("unknown {what} `{key}`, expected one of {list}"),
    }
}

/// Levenshtein distance over chars, for suggestions.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = here;
        }
    }
    row[b.len()]
}
