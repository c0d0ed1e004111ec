//! A format-neutral value tree that keeps duplicate keys, so that TOML and JSON files
//! are checked by the same code and every problem can be reported, not just the first.
//!
//! serde_json keeps the last of two equal keys silently; deserialising into [`Node`],
//! whose maps are lists of pairs, keeps both so the checker can name the duplicate.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The key toml uses to smuggle a datetime through serde.
const TOML_DATETIME: &str = "$__toml_private_datetime";

/// A parsed value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    /// Any integer the formats can carry (TOML: i64; JSON: i64 or u64).
    Int(i128),
    Float(f64),
    Str(String),
    /// A TOML datetime, kept as text only to name it in errors.
    Datetime(String),
    Seq(Vec<Node>),
    /// Keys in file order, duplicates included.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// How the value is described in a "wrong type" message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Node::Null => "null".into(),
            Node::Bool(b) => format!("boolean `{b}`"),
            Node::Int(i) => format!("integer `{i}`"),
            Node::Float(x) => format!("float `{x}`"),
            Node::Str(s) => {
                let shown: String = s.chars().take(40).collect();
                let more = if shown.len() < s.len() { "…" } else { "" };
                format!("string {shown:?}{more}")
            }
            Node::Datetime(d) => format!("datetime `{d}`"),
            Node::Seq(_) => "an array".into(),
            Node::Map(_) => "a table".into(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(i128::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(i128::from(v)))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        i128::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom("integer too large"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        if let [(key, Node::Str(text))] = entries.as_slice() {
            if key == TOML_DATETIME {
                return Ok(Node::Datetime(text.clone()));
            }
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_duplicates_are_kept() {
        let node: Node =
            serde_json::from_str(r#"{"a": 1, "a": {"b": [true, null, 1.5]}}"#).unwrap();
        assert_eq!(
            node,
            Node::Map(vec![
                ("a".into(), Node::Int(1)),
                (
                    "a".into(),
                    Node::Map(vec![(
                        "b".into(),
                        Node::Seq(vec![Node::Bool(true), Node::Null, Node::Float(1.5)])
                    )])
                ),
            ])
        );
    }

    #[test]
    fn toml_values_and_datetimes() {
        let node: Node = toml::from_str("a = 18446744073\nb = 1979-05-27T07:32:00Z\n").unwrap();
        assert_eq!(
            node,
            Node::Map(vec![
                ("a".into(), Node::Int(18_446_744_073)),
                ("b".into(), Node::Datetime("1979-05-27T07:32:00Z".into())),
            ])
        );
    }

    #[test]
    fn big_json_integers_are_exact() {
        let node: Node = serde_json::from_str("18446744073709551615").unwrap();
        assert_eq!(node, Node::Int(i128::from(u64::MAX)));
    }
}
