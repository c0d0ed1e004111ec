//! Where the problems of a policy text are: the line (and column) of the key at
//! fault, so that an editor can say "line 12" beside the runtime's message.
//!
//! The runtime's parser judges the text; this module only finds keys in it again.
//! Syntax errors carry their position in the parser's message ("at line 3, column
//! 14"); a field problem names its point and field, and the line is that of the key
//! (`breaker.k = 0.5`, `"k": 0.5`), or, for a missing field, of the section that lacks
//! it (`[points."x".timeouts]`, `timeouts = { ... }`).

use super::PolicyProblem;
use resilience_runtime::config::Format;

/// A key found in the text: its full path (`points`, the point, the field's parts),
/// 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    path: Vec<String>,
    line: usize,
    column: usize,
}

/// Sets `line` and `column` of every problem of `text` that can be placed.
pub(super) fn locate(problems: &mut [PolicyProblem], text: &str, format: Format) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let keys = match format {
        Format::Toml => toml_keys(text),
        Format::Json => json_keys(text),
    };
    for p in problems {
        // The parser's own position: syntax errors, and TOML duplicates (which the
        // TOML parser rejects itself, at the second occurrence).
        let positioned = matches!(
            p.kind.as_str(),
            "syntax" | "duplicate_point" | "duplicate_field"
        );
        if let Some((line, column)) = positioned.then(|| position_in(&p.message)).flatten() {
            p.line = Some(line);
            p.column = column;
            continue;
        }
        let path = problem_path(p);
        let last = p.kind.starts_with("duplicate");
        if let Some(k) = best_key(&keys, &path, last) {
            p.line = Some(k.line);
            p.column = Some(k.column);
        }
    }
}

/// `["points", point, field parts...]`, or the top-level key.
fn problem_path(p: &PolicyProblem) -> Vec<String> {
    let mut path = Vec::new();
    if let Some(point) = &p.point {
        path.push("points".to_owned());
        path.push(point.clone());
    }
    if let Some(field) = &p.field {
        path.extend(field_parts(field));
    }
    path
}

/// The parts of a field: split at its dots, but a quoted part (an override's value,
/// `keys.overrides."vip.42".limit`, quoted as a JSON string) is one part, unquoted.
fn field_parts(field: &str) -> Vec<String> {
    if field.contains('"') {
        if let Some((parts, rest)) = toml_key(field) {
            if rest.is_empty() {
                return parts;
            }
        }
    }
    field.split('.').map(str::to_owned).collect()
}

/// The key a problem at `path` is about: the key itself (the last one for a
/// duplicate), else the first key inside it (a point written only as sub-tables),
/// else the deepest key that contains it (the section of a missing field).
fn best_key<'k>(keys: &'k [Key], path: &[String], last: bool) -> Option<&'k Key> {
    if path.is_empty() {
        return None;
    }
    let mut exact = keys.iter().filter(|k| k.path == path);
    let found = if last {
        exact.next_back()
    } else {
        exact.next()
    };
    found
        .or_else(|| {
            keys.iter()
                .find(|k| k.path.len() > path.len() && k.path.starts_with(path))
        })
        .or_else(|| {
            keys.iter()
                .filter(|k| k.path.len() < path.len() && path.starts_with(&k.path))
                .max_by_key(|k| (k.path.len(), std::cmp::Reverse(k.line)))
        })
}

/// "line 3, column 14" (TOML), "line 3 column 14" (JSON), "line 3".
fn position_in(message: &str) -> Option<(usize, Option<usize>)> {
    let at = message.rfind("line ")?;
    let rest = &message[at + "line ".len()..];
    let digits = |s: &str| -> Option<(usize, usize)> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        s[..n].parse().ok().map(|v| (v, n))
    };
    let (line, n) = digits(rest)?;
    let rest = rest[n..].trim_start_matches(',').trim_start();
    let column = rest
        .strip_prefix("column ")
        .and_then(digits)
        .map(|(c, _)| c);
    Some((line, column))
}

// ---- TOML ----

/// Every table header and every `key = value` of a TOML text, with the full path.
/// Values are skipped over (strings, multi-line strings and arrays, inline tables),
/// so a `=` or `[` inside a value is never taken for a key.
fn toml_keys(text: &str) -> Vec<Key> {
    let mut keys = Vec::new();
    let mut table: Vec<String> = Vec::new();
    let mut value = ValueScan::default();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if value.open() {
            value.scan(line);
            continue;
        }
        let trimmed = line.trim_start();
        let column = line[..line.len() - trimmed.len()].chars().count() + 1;
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(header) = trimmed.strip_prefix('[') {
            let header = header.strip_prefix('[').unwrap_or(header);
            if let Some((path, _)) = toml_key(header) {
                table = path.clone();
                keys.push(Key {
                    path,
                    line: number,
                    column,
                });
            }
            continue;
        }
        let Some((path, rest)) = toml_key(trimmed) else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let mut full = table.clone();
        full.extend(path);
        keys.push(Key {
            path: full.clone(),
            line: number,
            column,
        });
        // The keys of an inline table on the same line.
        inline_keys(line, rest, &full, number, &mut keys);
        value.scan(rest);
    }
    keys
}

/// The keys of an inline table value on one line (`timeouts = { threshold = "1s" }`):
/// `value` is the text after the `=` (a suffix of `line`).
fn inline_keys(line: &str, value: &str, prefix: &[String], number: usize, out: &mut Vec<Key>) {
    if let Some(inner) = value.trim_start().strip_prefix('{') {
        inline_table(line, inner, prefix, number, out);
    }
}

/// The keys of `{ ... }` from just after its `{`; the text after its `}`, or `None` if
/// it does not close on this line (or is not well formed: the parser has said so).
fn inline_table<'t>(
    line: &str,
    mut rest: &'t str,
    prefix: &[String],
    number: usize,
    out: &mut Vec<Key>,
) -> Option<&'t str> {
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some(after);
        }
        let column = line[..line.len() - rest.len()].chars().count() + 1;
        let (path, after) = toml_key(rest)?;
        let mut full = prefix.to_vec();
        full.extend(path);
        out.push(Key {
            path: full.clone(),
            line: number,
            column,
        });
        rest = after.trim_start().strip_prefix('=')?.trim_start();
        rest = match rest.as_bytes().first()? {
            b'{' => inline_table(line, &rest[1..], &full, number, out)?,
            b'"' | b'\'' => skip_string(rest),
            b'[' => skip_array(rest)?,
            _ => &rest[rest.find([',', '}']).unwrap_or(rest.len())..],
        };
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        }
    }
}

/// `text` after the one-line array it starts with.
fn skip_array(text: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match c {
            '"' | '\'' => {
                rest = skip_string(rest);
                continue;
            }
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(&rest[1..]);
                }
            }
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    None
}

/// Whether a value continues on the next lines (an open array, inline table or
/// multi-line string), updated line by line.
#[derive(Default)]
struct ValueScan {
    depth: usize,
    multiline: Option<&'static str>,
}

impl ValueScan {
    fn open(&self) -> bool {
        self.depth > 0 || self.multiline.is_some()
    }

    fn scan(&mut self, line: &str) {
        let mut rest = line;
        loop {
            if let Some(close) = self.multiline {
                match find_close(rest, close) {
                    Some(end) => {
                        self.multiline = None;
                        rest = &rest[end..];
                    }
                    None => return,
                }
            }
            let Some(c) = rest.chars().next() else {
                return;
            };
            match c {
                '#' => return,
                '[' | '{' => self.depth += 1,
                ']' | '}' => self.depth = self.depth.saturating_sub(1),
                '"' | '\'' => {
                    let triple: &'static str = if c == '"' { "\"\"\"" } else { "'''" };
                    if let Some(after) = rest.strip_prefix(triple) {
                        self.multiline = Some(triple);
                        rest = after;
                    } else {
                        rest = skip_string(rest);
                    }
                    continue;
                }
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
        }
    }
}

/// The offset just after the closing `"""` / `'''` in `text` (escapes skipped in
/// basic strings).
fn find_close(text: &str, close: &str) -> Option<usize> {
    let basic = close.starts_with('"');
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if basic && bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if text[i..].starts_with(close) {
            // Up to two more quotes belong to the string.
            let mut end = i + close.len();
            while end < bytes.len() && bytes[end] == close.as_bytes()[0] && end < i + 5 {
                end += 1;
            }
            return Some(end);
        }
        i += 1;
    }
    None
}

/// `text` after the one-line string it starts with (`"..."` or `'...'`).
fn skip_string(text: &str) -> &str {
    let quote = text.as_bytes()[0];
    let bytes = text.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b if b == quote => return &text[i + 1..],
            _ => i += 1,
        }
    }
    ""
}

/// A possibly dotted and quoted TOML key at the start of `text`, and the text after it.
fn toml_key(text: &str) -> Option<(Vec<String>, &str)> {
    let mut parts = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let (part, after) = match rest.as_bytes().first()? {
            b'"' => basic_string(rest)?,
            b'\'' => {
                let end = rest[1..].find('\'')? + 1;
                (rest[1..end].to_owned(), &rest[end + 1..])
            }
            _ => {
                let n = rest
                    .bytes()
                    .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
                    .count();
                if n == 0 {
                    return None;
                }
                (rest[..n].to_owned(), &rest[n..])
            }
        };
        parts.push(part);
        let after = after.trim_start();
        match after.strip_prefix('.') {
            Some(next) => rest = next.trim_start(),
            None => return Some((parts, after)),
        }
    }
}

/// A TOML basic string (`"..."`, escapes decoded) and the text after it.
fn basic_string(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &text[i + 1..])),
            '\\' => {
                let (_, e) = chars.next()?;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'e' => out.push('\u{1b}'),
                    'u' | 'U' | 'x' => {
                        let n = match e {
                            'u' => 4,
                            'U' => 8,
                            _ => 2,
                        };
                        let hex: String = (0..n)
                            .filter_map(|_| chars.next().map(|(_, h)| h))
                            .collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    other => out.push(other),
                }
            }
            c => out.push(c),
        }
    }
    None
}

// ---- JSON ----

/// Every object key of a JSON text with its full path (arrays add nothing to it).
fn json_keys(text: &str) -> Vec<Key> {
    enum Frame {
        Object {
            key: Option<String>,
            expect_key: bool,
        },
        Array,
    }
    let mut keys = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let (mut line, mut line_start) = (1, 0);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => {
                line += 1;
                line_start = i + 1;
            }
            '{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            '[' => stack.push(Frame::Array),
            '}' | ']' => {
                stack.pop();
            }
            ',' => {
                if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            '"' => {
                let column = text[line_start..i].chars().count() + 1;
                let mut s = String::new();
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next().map(|(_, e)| e) {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some('r') => s.push('\r'),
                            Some('b') => s.push('\u{8}'),
                            Some('f') => s.push('\u{c}'),
                            Some('u') => {
                                let hex: String = (0..4)
                                    .filter_map(|_| chars.next().map(|(_, h)| h))
                                    .collect();
                                if let Some(ch) =
                                    u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)
                                {
                                    s.push(ch);
                                }
                            }
                            Some(other) => s.push(other),
                            None => break,
                        },
                        // A raw newline is a syntax error; keep the count right anyway.
                        '\n' => {
                            line += 1;
                            s.push('\n');
                        }
                        c => s.push(c),
                    }
                }
                let is_key = matches!(
                    stack.last(),
                    Some(Frame::Object {
                        expect_key: true,
                        ..
                    })
                );
                if is_key {
                    let mut path: Vec<String> = stack
                        .iter()
                        .filter_map(|f| match f {
                            Frame::Object { key, .. } => key.clone(),
                            Frame::Array => None,
                        })
                        .collect();
                    // The innermost object's previous key is not part of this path.
                    if let Some(Frame::Object { key: Some(_), .. }) = stack.last() {
                        path.pop();
                    }
                    path.push(s.clone());
                    keys.push(Key { path, line, column });
                    if let Some(Frame::Object { key, expect_key }) = stack.last_mut() {
                        *key = Some(s);
                        *expect_key = false;
                    }
                }
            }
            _ => {}
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(keys: &[Key]) -> Vec<(String, usize)> {
        keys.iter().map(|k| (k.path.join("/"), k.line)).collect()
    }

    fn owned(list: &[(&str, usize)]) -> Vec<(String, usize)> {
        list.iter().map(|(p, l)| ((*p).to_owned(), *l)).collect()
    }

    #[test]
    fn toml_keys_have_full_paths() {
        let text = "strict = true\n\
                    [points.\"order.create\"]\n\
                    max_visits = 5 # a comment with = and [\n\
                    timeouts = { threshold = \"1s\", max_count = 2 }\n\
                    note = \"\"\"\n\
                    [not.a.header]\n\
                    x = 1\"\"\"\n\
                    list = [\n  1,\n  2,\n]\n\
                    breaker.k = 2.0\n\
                    \n\
                    [points.'b'.breaker.open_wait]\n\
                    base = \"1s\"\n";
        assert_eq!(
            paths(&toml_keys(text)),
            owned(&[
                ("strict", 1),
                ("points/order.create", 2),
                ("points/order.create/max_visits", 3),
                ("points/order.create/timeouts", 4),
                ("points/order.create/timeouts/threshold", 4),
                ("points/order.create/timeouts/max_count", 4),
                ("points/order.create/note", 5),
                ("points/order.create/list", 8),
                ("points/order.create/breaker/k", 12),
                ("points/b/breaker/open_wait", 14),
                ("points/b/breaker/open_wait/base", 15),
            ])
        );
    }

    #[test]
    fn json_keys_have_full_paths() {
        let text = "{\n  \"points\": {\n    \"a\\u0062\": {\n      \"max_visits\": 1,\n      \
                    \"breaker\": {\"algorithm\": \"sre\",\n        \"k\": 0.5}\n    },\n    \
                    \"c\": {\"delay\": {\"duration\": \"1s\"}}\n  }\n}\n";
        assert_eq!(
            paths(&json_keys(text)),
            owned(&[
                ("points", 2),
                ("points/ab", 3),
                ("points/ab/max_visits", 4),
                ("points/ab/breaker", 5),
                ("points/ab/breaker/algorithm", 5),
                ("points/ab/breaker/k", 6),
                ("points/c", 8),
                ("points/c/delay", 8),
                ("points/c/delay/duration", 8),
            ])
        );
    }

    fn problem(
        point: Option<&str>,
        field: Option<&str>,
        kind: &str,
        message: &str,
    ) -> PolicyProblem {
        PolicyProblem {
            point: point.map(str::to_owned),
            field: field.map(str::to_owned),
            kind: kind.to_owned(),
            message: message.to_owned(),
            line: None,
            column: None,
        }
    }

    #[test]
    fn problems_get_the_line_of_their_key_or_section() {
        let text = "[points.a]\nmax_visits = 1\n\n[points.a.timeouts]\nmax_count = 2\n\n\
                    [points.b.breaker]\nalgorithm = \"sre\"\nk = 0.5\n";
        let mut problems = vec![
            problem(
                Some("a"),
                Some("timeouts.threshold"),
                "missing_field",
                "required",
            ),
            problem(
                Some("a"),
                Some("max_visits"),
                "wrong_type",
                "got string \"line 9\"",
            ),
            problem(Some("b"), Some("breaker.k"), "out_of_range", "too small"),
            problem(Some("b"), None, "unknown_point", "unknown"),
            problem(
                None,
                None,
                "syntax",
                "TOML syntax error at line 7, column 3: oops",
            ),
            problem(
                Some("zz"),
                Some("max_visits"),
                "wrong_type",
                "not in the text",
            ),
        ];
        locate(&mut problems, text, Format::Toml);
        let lines: Vec<_> = problems.iter().map(|p| (p.line, p.column)).collect();
        assert_eq!(
            lines,
            [
                (Some(4), Some(1)),
                (Some(2), Some(1)),
                (Some(9), Some(1)),
                (Some(7), Some(1)),
                (Some(7), Some(3)),
                (None, None),
            ]
        );
        let mut json = vec![problem(
            None,
            None,
            "syntax",
            "JSON syntax error: expected `:` at line 3 column 9",
        )];
        locate(&mut json, "{}", Format::Json);
        assert_eq!((json[0].line, json[0].column), (Some(3), Some(9)));
    }

    #[test]
    fn an_override_is_placed_at_its_value_even_with_dots_in_it() {
        assert_eq!(
            field_parts("keys.overrides.\"v.i\\\"p\".limit"),
            ["keys", "overrides", "v.i\"p", "limit"]
        );
        let text = "[points.a.keys]\nlimit = 1\n[points.a.keys.overrides]\n\"x.y\" = 2\n\
                    slow = { burst = 0, max_concurrency = 1 }\n";
        let mut problems = vec![
            problem(
                Some("a"),
                Some("keys.overrides.\"x.y\""),
                "out_of_range",
                "bad",
            ),
            problem(
                Some("a"),
                Some("keys.overrides.\"slow\".burst"),
                "out_of_range",
                "bad",
            ),
        ];
        locate(&mut problems, text, Format::Toml);
        let lines: Vec<_> = problems.iter().map(|p| (p.line, p.column)).collect();
        assert_eq!(lines, [(Some(4), Some(1)), (Some(5), Some(10))]);
        let json = "{\"points\": {\"a\": {\"keys\": {\"overrides\": {\n\"x.y\": 2}}}}}";
        let mut problems = vec![problem(
            Some("a"),
            Some("keys.overrides.\"x.y\""),
            "out_of_range",
            "bad",
        )];
        locate(&mut problems, json, Format::Json);
        assert_eq!((problems[0].line, problems[0].column), (Some(2), Some(1)));
    }

    #[test]
    fn a_json_duplicate_is_placed_at_its_second_occurrence() {
        let text = "{\"points\": {\"a\": {\n\"max_visits\": 1,\n\"max_visits\": 2}}}";
        let mut problems = vec![problem(
            Some("a"),
            Some("max_visits"),
            "duplicate_field",
            "twice",
        )];
        locate(&mut problems, text, Format::Json);
        assert_eq!(problems[0].line, Some(3));
    }
}
