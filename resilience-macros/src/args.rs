//! Owns the argument grammar shared by `#[downgrade(...)]` and `#[breaker(...)]`.
//!
//! ```text
//! args     := (arg ("," arg)* ","?)?
//! arg      := "point" "=" LitStr
//!           | "fallback" "=" path
//!           | "fallback_with_reason" "=" path
//!           | "default" ("=" expr)?
//!           | "is_exception" "=" path
//!           | "timeout" "=" LitStr        // a duration: "200ms", "1.5s", "1m30s"
//!           | "crate" "=" LitStr          // the string holds a path
//! ```
//!
//! Parsing does not stop at the first bad argument: it records the error,
//! skips to the next top-level `,` and goes on, so one compile shows every
//! mistake in the attribute.

use std::fmt;

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt as _;
use syn::parse::{ParseStream, Parser as _};
use syn::{Expr, ExprPath, Ident, Lit, LitStr, Path, Token};

use crate::validate::Errors;

/// Custom keywords for the argument names (`crate` is a real keyword).
pub(crate) mod kw {
    syn::custom_keyword!(point);
    syn::custom_keyword!(fallback);
    syn::custom_keyword!(fallback_with_reason);
    syn::custom_keyword!(default);
    syn::custom_keyword!(is_exception);
    syn::custom_keyword!(timeout);
}

/// Every argument name, in the order diagnostics list them.
const EXPECTED: &str =
    "`point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `crate`";

/// Which attribute is being expanded; used in diagnostics.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Downgrade,
    Breaker,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Downgrade => "downgrade",
            Kind::Breaker => "breaker",
        })
    }
}

/// One argument as written: where its key is, which argument of the list it
/// was (so "the second of two" can be found), and its value.
pub(crate) struct Arg<T> {
    pub(crate) key_span: Span,
    pub(crate) position: usize,
    pub(crate) value: T,
}

/// The value of `timeout`: the duration its string says.
pub(crate) struct Timeout {
    /// Nanoseconds, 1..=[`MAX_TIMEOUT_NS`].
    pub(crate) nanos: u64,
}

/// The value of `default`.
pub(crate) enum DefaultValue {
    /// `default = expr`.
    Expr(Expr),
    /// Bare `default`: `::core::default::Default::default()`.
    Trait,
}

/// The parsed arguments of `#[downgrade]` / `#[breaker]`.
///
/// Contradictions between arguments (`fallback` with `default`) are left for
/// `validate`, which sees the whole model.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) point: Option<Arg<LitStr>>,
    pub(crate) fallback: Option<Arg<ExprPath>>,
    pub(crate) fallback_with_reason: Option<Arg<ExprPath>>,
    pub(crate) default: Option<Arg<DefaultValue>>,
    pub(crate) is_exception: Option<Arg<ExprPath>>,
    pub(crate) timeout: Option<Arg<Timeout>>,
    pub(crate) krate: Option<Arg<Path>>,
}

impl Args {
    /// The function called with the arguments when the call is downgraded (or cut),
    /// and whether it also takes the `Downgraded`.
    pub(crate) fn fallback_fn(&self) -> Option<(&ExprPath, bool)> {
        match (&self.fallback, &self.fallback_with_reason) {
            (Some(f), _) => Some((&f.value, false)),
            (None, Some(f)) => Some((&f.value, true)),
            (None, None) => None,
        }
    }
}

impl Args {
    /// Parses the attribute's arguments.
    ///
    /// Returns whatever could be parsed together with the combined errors, so
    /// that the item can still be validated and every mistake reported at once.
    pub(crate) fn parse(tokens: TokenStream) -> (Args, Option<syn::Error>) {
        let mut args = Args::default();
        let mut errors = Errors::default();
        let parser = |input: ParseStream<'_>| {
            let mut position = 0;
            while !input.is_empty() {
                if let Err(err) = args.parse_one(input, position) {
                    errors.push(err);
                    skip_past_comma(input);
                    position += 1;
                    continue;
                }
                position += 1;
                if input.is_empty() {
                    break;
                }
                if let Err(err) = input.parse::<Token![,]>() {
                    errors.push(syn::Error::new(
                        err.span(),
                        "expected `,` between arguments",
                    ));
                    skip_past_comma(input);
                }
            }
            Ok(())
        };
        if let Err(err) = parser.parse2(tokens) {
            errors.push(err);
        }
        (args, errors.finish())
    }

    fn parse_one(&mut self, input: ParseStream<'_>, position: usize) -> syn::Result<()> {
        let key_span = input.span();
        if input.peek(kw::point) {
            let value = key_value::<kw::point, _>(input, point_name)?;
            set_once(&mut self.point, arg(key_span, position, value), "point")
        } else if input.peek(kw::fallback) {
            let value = key_value::<kw::fallback, _>(input, |input| {
                function_path(input, "fallback = Self::fallback")
            })?;
            set_once(
                &mut self.fallback,
                arg(key_span, position, value),
                "fallback",
            )
        } else if input.peek(kw::fallback_with_reason) {
            let value = key_value::<kw::fallback_with_reason, _>(input, |input| {
                function_path(input, "fallback_with_reason = Self::fallback")
            })?;
            set_once(
                &mut self.fallback_with_reason,
                arg(key_span, position, value),
                "fallback_with_reason",
            )
        } else if input.peek(kw::timeout) {
            let value = key_value::<kw::timeout, _>(input, timeout)?;
            set_once(&mut self.timeout, arg(key_span, position, value), "timeout")
        } else if input.peek(kw::default) {
            input.parse::<kw::default>()?;
            let value = if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                DefaultValue::Expr(input.parse()?)
            } else if input.is_empty() || input.peek(Token![,]) {
                DefaultValue::Trait
            } else {
                return Err(input.error("expected `=` or `,` after `default`"));
            };
            set_once(&mut self.default, arg(key_span, position, value), "default")
        } else if input.peek(kw::is_exception) {
            let value = key_value::<kw::is_exception, _>(input, |input| {
                function_path(input, "is_exception = is_server_error")
            })?;
            set_once(
                &mut self.is_exception,
                arg(key_span, position, value),
                "is_exception",
            )
        } else if input.peek(Token![crate]) {
            let value = key_value::<Token![crate], _>(input, crate_path)?;
            set_once(&mut self.krate, arg(key_span, position, value), "crate")
        } else if input.peek(Ident::peek_any) {
            // Any identifier, keywords included, so `type = ..` gets the same message.
            let ident = input.call(Ident::parse_any)?;
            Err(syn::Error::new(
                ident.span(),
                format!("unknown argument `{ident}`, expected one of {EXPECTED}"),
            ))
        } else {
            Err(input.error(format!("expected one of {EXPECTED}")))
        }
    }
}

fn arg<T>(key_span: Span, position: usize, value: T) -> Arg<T> {
    Arg {
        key_span,
        position,
        value,
    }
}

/// The one place that enforces "may only be given once"; the error points at
/// the second occurrence, the one to delete.
pub(crate) fn set_once<T>(slot: &mut Option<Arg<T>>, value: Arg<T>, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            value.key_span,
            format!("duplicate argument `{name}`"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// `KEY = VALUE`, for any key token and value parser.
fn key_value<K, V>(
    input: ParseStream<'_>,
    value: impl FnOnce(ParseStream<'_>) -> syn::Result<V>,
) -> syn::Result<V>
where
    K: syn::parse::Parse,
{
    input.parse::<K>()?;
    input.parse::<Token![=]>()?;
    value(input)
}

/// The runtime's `MAX_POINT_NAME_LEN` (a proc-macro crate cannot import it; the
/// ui tests check that both refuse a name one byte longer).
const MAX_POINT_NAME_LEN: usize = 256;

/// `"orders::get"`: a non-blank string literal.
fn point_name(input: ParseStream<'_>) -> syn::Result<LitStr> {
    let lit = string_literal(input, "point = \"orders::get\"")?;
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "`point` must not be empty or only whitespace",
        ));
    }
    // The runtime's rule (`check_point_name`), checked here so that the generated
    // lookup cannot fail: the runtime and the admin console refuse these too.
    let value = lit.value();
    let problem = if value.trim() != value {
        Some("`point` must not begin or end with whitespace")
    } else if value.chars().any(char::is_control) {
        Some("`point` must not contain control characters")
    } else if value.len() > MAX_POINT_NAME_LEN {
        Some("`point` must be at most 256 bytes long (the runtime's `MAX_POINT_NAME_LEN`)")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(syn::Error::new(lit.span(), problem)),
        None => Ok(lit),
    }
}

/// The runtime's `MAX_CALL_TIMEOUT`, one day (a proc-macro crate cannot import it).
pub(crate) const MAX_TIMEOUT_NS: u64 = 24 * 3_600_000_000_000;

/// `"200ms"`: a string literal holding a duration greater than zero and at most a day.
fn timeout(input: ParseStream<'_>) -> syn::Result<Timeout> {
    let lit = string_literal(input, "timeout = \"200ms\"")?;
    let nanos = match parse_duration(&lit.value()) {
        Ok(0) => Err("`timeout` must be greater than zero".to_owned()),
        Ok(nanos) if nanos > MAX_TIMEOUT_NS => Err(
            "`timeout` must be at most one day (`\"24h\"`, the runtime's `MAX_CALL_TIMEOUT`)"
                .to_owned(),
        ),
        Ok(nanos) => Ok(nanos),
        Err(problem) => Err(problem),
    };
    match nanos {
        Ok(nanos) => Ok(Timeout { nanos }),
        Err(problem) => Err(syn::Error::new(lit.span(), problem)),
    }
}

/// Nanoseconds per unit of a duration, the units policy files take.
const UNITS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// A duration in the syntax of the runtime's policy files: one or more
/// `<number><unit>` parts added up (`"200ms"`, `"1.5s"`, `"1m 30s"`), the
/// number a non-negative decimal, the unit one of `ns`, `us`, `ms`, `s`, `m`, `h`.
/// A unit is required. Saturates far beyond any accepted timeout.
fn parse_duration(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected a duration with a unit, e.g. `timeout = \"200ms\"` \
                            (units ns, us, ms, s, m, h)";
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(format!("{EXPECTED}, got an empty string"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if number.is_empty() {
            return Err(format!("{EXPECTED}; expected a number before `{unit}`"));
        }
        if unit.is_empty() {
            let spaced = after.starts_with(char::is_whitespace)
                && after.trim_start().starts_with(char::is_alphabetic);
            let hint = if spaced {
                format!(" (write the unit right after the number: `{number}s`, not `{number} s`)")
            } else {
                String::new()
            };
            return Err(format!("{EXPECTED}; missing unit after `{number}`{hint}"));
        }
        let Some(&(_, per_unit)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(format!("{EXPECTED}; unknown unit `{unit}`"));
        };
        let nanos = scale(number, per_unit)
            .ok_or_else(|| format!("{EXPECTED}; `{number}` is not a number"))?;
        total = total.saturating_add(nanos);
        rest = after.trim_start();
    }
    Ok(u64::try_from(total).unwrap_or(u64::MAX))
}

/// `number` (digits with at most one `.`) times `unit` nanoseconds, rounded down.
fn scale(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let whole: u128 = match whole {
        "" => 0,
        // Far beyond any accepted timeout; also keeps the product from overflowing.
        digits if digits.len() > 30 => u128::MAX / 2,
        digits => digits.parse().ok()?,
    };
    let mut nanos = whole.saturating_mul(unit);
    let mut place = unit;
    for digit in fraction.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        nanos = nanos.saturating_add(u128::from(digit - b'0') * place);
    }
    Some(nanos)
}

/// `"::path::to::runtime"`: a string literal holding a path.
fn crate_path(input: ParseStream<'_>) -> syn::Result<Path> {
    let lit = string_literal(input, "crate = \"::resilience_runtime\"")?;
    lit.parse_with(Path::parse_mod_style).map_err(|_| {
        syn::Error::new(
            lit.span(),
            "expected a path in the string, e.g. `crate = \"::resilience_runtime\"`",
        )
    })
}

/// A string literal without suffix; anything else is an error at that token.
fn string_literal(input: ParseStream<'_>, example: &str) -> syn::Result<LitStr> {
    // Parse a whole expression so that `point = a::b` or `point = 1 + 2` is
    // reported as one span rather than as a confusing follow-up error.
    match input.parse::<Expr>()? {
        Expr::Lit(syn::ExprLit {
            attrs,
            lit: Lit::Str(lit),
        }) if attrs.is_empty() => {
            if lit.suffix().is_empty() {
                Ok(lit)
            } else {
                Err(syn::Error::new(
                    lit.span(),
                    format!("unexpected suffix `{}` on string literal", lit.suffix()),
                ))
            }
        }
        other => Err(syn::Error::new_spanned(
            other,
            format!("expected a string literal, e.g. `{example}`"),
        )),
    }
}

/// A path to a function, kept exactly as the user wrote it: `f`,
/// `Self::f`, `module::f`, `f::<T>`, `<T as Trait>::f`.
fn function_path(input: ParseStream<'_>, example: &str) -> syn::Result<ExprPath> {
    match input.parse::<Expr>()? {
        Expr::Path(path) if path.attrs.is_empty() => Ok(path),
        Expr::Closure(closure) => Err(syn::Error::new_spanned(
            closure,
            format!("expected a path to a function, found a closure; define a function and write `{example}`"),
        )),
        other => Err(syn::Error::new_spanned(
            other,
            format!("expected a path to a function, e.g. `{example}`"),
        )),
    }
}

/// Error recovery: drop tokens up to and including the next top-level `,`.
///
/// Groups are single token trees, so a comma inside `f(a, b)` is not seen.
/// A comma inside generic arguments (`f::<A, B>`) is, which only costs a
/// follow-up error in input that is already wrong.
fn skip_past_comma(input: ParseStream<'_>) {
    let _ = input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            rest = next;
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
        }
        Ok(((), rest))
    });
}

#[cfg(test)]
mod tests {
    use quote::{quote, ToTokens as _};

    use super::*;

    fn parse(tokens: TokenStream) -> (Args, Vec<String>) {
        let (args, err) = Args::parse(tokens);
        let messages = err
            .map(|err| err.into_iter().map(|e| e.to_string()).collect())
            .unwrap_or_default();
        (args, messages)
    }

    fn parse_ok(tokens: TokenStream) -> Args {
        let (args, errors) = parse(tokens);
        assert!(errors.is_empty(), "unexpected errors: {errors:?}");
        args
    }

    #[test]
    fn empty_arguments() {
        let args = parse_ok(quote!());
        assert!(args.point.is_none());
        assert!(args.fallback.is_none());
        assert!(args.default.is_none());
        assert!(args.is_exception.is_none());
        assert!(args.krate.is_none());
        assert!(args.fallback_with_reason.is_none());
        assert!(args.timeout.is_none());
    }

    #[test]
    fn timeout_and_fallback_with_reason() {
        let args = parse_ok(quote!(timeout = "200ms", fallback_with_reason = Self::cut));
        let timeout = args.timeout.unwrap();
        assert_eq!(timeout.value.nanos, 200_000_000);
        assert_eq!(timeout.position, 0);
        let fallback = args.fallback_with_reason.unwrap();
        assert_eq!(fallback.value.to_token_stream().to_string(), "Self :: cut");
        assert!(args.fallback.is_none());
    }

    #[test]
    fn timeout_durations() {
        for (text, nanos) in [
            ("1ns", 1),
            ("250us", 250_000),
            ("2µs", 2_000),
            ("200ms", 200_000_000),
            ("1.5s", 1_500_000_000),
            ("1m 30s", 90_000_000_000),
            (" 2s ", 2_000_000_000),
            ("24h", MAX_TIMEOUT_NS),
        ] {
            assert_eq!(parse_duration(text), Ok(nanos), "{text}");
            let args = parse_ok(quote!(timeout = #text));
            assert_eq!(args.timeout.unwrap().value.nanos, nanos, "{text}");
        }
    }

    #[test]
    fn bad_timeouts() {
        for (tokens, message) in [
            (
                quote!(timeout = "0ms"),
                "`timeout` must be greater than zero",
            ),
            (
                quote!(timeout = "24h 1ns"),
                "`timeout` must be at most one day (`\"24h\"`, the runtime's `MAX_CALL_TIMEOUT`)",
            ),
            (
                quote!(timeout = 200),
                "expected a string literal, e.g. `timeout = \"200ms\"`",
            ),
            (
                quote!(timeout = Duration::from_millis(200)),
                "expected a string literal, e.g. `timeout = \"200ms\"`",
            ),
        ] {
            let (args, errors) = parse(tokens.clone());
            assert_eq!(errors, [message], "{tokens}");
            assert!(args.timeout.is_none());
        }
        for (text, problem) in [
            ("200", "missing unit after `200`"),
            ("1m 30", "missing unit after `30`"),
            (
                "2 seconds",
                "missing unit after `2` (write the unit right after the number: `2s`, not `2 s`)",
            ),
            ("fast", "expected a number before `fast`"),
            ("2weeks", "unknown unit `weeks`"),
            ("1..5s", "`1..5` is not a number"),
            ("", "got an empty string"),
        ] {
            let (_, errors) = parse(quote!(timeout = #text));
            assert_eq!(errors.len(), 1, "{text}");
            assert!(
                errors[0].starts_with("expected a duration with a unit, e.g. `timeout = \"200ms\"` (units ns, us, ms, s, m, h)"),
                "{text}: {errors:?}"
            );
            assert!(errors[0].ends_with(problem), "{text}: {errors:?}");
        }
    }

    #[test]
    fn every_argument() {
        let args = parse_ok(quote!(
            point = "orders::get",
            fallback = Self::cached,
            is_exception = is_server_error,
            crate = "::my_rt",
        ));
        assert_eq!(args.point.unwrap().value.value(), "orders::get");
        let fallback = args.fallback.unwrap();
        assert_eq!(
            fallback.value.to_token_stream().to_string(),
            "Self :: cached"
        );
        assert_eq!(fallback.position, 1);
        let is_exception = args.is_exception.unwrap();
        assert_eq!(
            is_exception.value.to_token_stream().to_string(),
            "is_server_error"
        );
        assert_eq!(
            args.krate.unwrap().value.to_token_stream().to_string(),
            ":: my_rt"
        );
    }

    #[test]
    fn fallback_paths() {
        for path in [
            quote!(create_fallback),
            quote!(Self::fallback),
            quote!(module::f),
            quote!(f::<u8, u16>),
            quote!(<T as Trait>::f),
        ] {
            let args = parse_ok(quote!(fallback = #path, point = "p"));
            assert_eq!(
                args.fallback.unwrap().value.to_token_stream().to_string(),
                path.to_string()
            );
            assert!(args.point.is_some());
        }
    }

    #[test]
    fn default_bare_and_with_value() {
        let args = parse_ok(quote!(default));
        assert!(matches!(args.default.unwrap().value, DefaultValue::Trait));
        let args = parse_ok(quote!(default, point = "p"));
        assert!(matches!(args.default.unwrap().value, DefaultValue::Trait));
        let args = parse_ok(quote!(default = Vec::new()));
        match args.default.unwrap().value {
            DefaultValue::Expr(expr) => {
                assert_eq!(expr.to_token_stream().to_string(), "Vec :: new ()");
            }
            DefaultValue::Trait => panic!("expected an expression"),
        }
    }

    #[test]
    fn duplicate_argument() {
        let (args, errors) = parse(quote!(point = "a", point = "b"));
        assert_eq!(errors, ["duplicate argument `point`"]);
        // The first one wins; the second is the one reported.
        assert_eq!(args.point.unwrap().value.value(), "a");
    }

    #[test]
    fn duplicate_of_each_argument() {
        for (tokens, name) in [
            (quote!(fallback = a, fallback = b), "fallback"),
            (quote!(default, default = 1), "default"),
            (quote!(is_exception = a, is_exception = b), "is_exception"),
            (quote!(crate = "a", crate = "b"), "crate"),
            (quote!(timeout = "1s", timeout = "2s"), "timeout"),
            (
                quote!(fallback_with_reason = a, fallback_with_reason = b),
                "fallback_with_reason",
            ),
        ] {
            let (_, errors) = parse(tokens);
            assert_eq!(errors, [format!("duplicate argument `{name}`")]);
        }
    }

    #[test]
    fn unknown_argument() {
        let (args, errors) = parse(quote!(fallbak = f, point = "p"));
        assert_eq!(
            errors,
            ["unknown argument `fallbak`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `crate`"]
        );
        // Parsing went on after the bad argument.
        assert_eq!(args.point.unwrap().value.value(), "p");
    }

    #[test]
    fn unknown_keyword_argument() {
        let (_, errors) = parse(quote!(type = u8));
        assert_eq!(
            errors,
            ["unknown argument `type`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `crate`"]
        );
    }

    #[test]
    fn empty_point() {
        let (args, errors) = parse(quote!(point = ""));
        assert_eq!(errors, ["`point` must not be empty or only whitespace"]);
        assert!(args.point.is_none());
        let (_, errors) = parse(quote!(point = "  \t"));
        assert_eq!(errors, ["`point` must not be empty or only whitespace"]);
    }

    #[test]
    fn point_must_be_a_string() {
        let (_, errors) = parse(quote!(point = orders::get));
        assert_eq!(
            errors,
            ["expected a string literal, e.g. `point = \"orders::get\"`"]
        );
        let (_, errors) = parse(quote!(point = 42));
        assert_eq!(
            errors,
            ["expected a string literal, e.g. `point = \"orders::get\"`"]
        );
    }

    #[test]
    fn fallback_must_be_a_path() {
        let (_, errors) = parse(quote!(fallback = "f"));
        assert_eq!(
            errors,
            ["expected a path to a function, e.g. `fallback = Self::fallback`"]
        );
        let (_, errors) = parse(quote!(fallback = |x| x));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("found a closure"), "{errors:?}");
    }

    #[test]
    fn crate_must_be_a_string_holding_a_path() {
        let (_, errors) = parse(quote!(crate = my_rt));
        assert_eq!(
            errors,
            ["expected a string literal, e.g. `crate = \"::resilience_runtime\"`"]
        );
        let (_, errors) = parse(quote!(crate = "not a path"));
        assert_eq!(
            errors,
            ["expected a path in the string, e.g. `crate = \"::resilience_runtime\"`"]
        );
    }

    #[test]
    fn every_mistake_is_reported() {
        let (_, errors) = parse(quote!(fallbak = f, point = "", point = "a", point = "b"));
        assert_eq!(
            errors,
            [
                "unknown argument `fallbak`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `crate`",
                "`point` must not be empty or only whitespace",
                "duplicate argument `point`",
            ]
        );
    }

    #[test]
    fn missing_comma() {
        let (args, errors) = parse(quote!(point = "a" fallback = f, default));
        assert_eq!(errors, ["expected `,` between arguments"]);
        assert!(args.default.is_some());
    }

    #[test]
    fn default_without_equals() {
        let (_, errors) = parse(quote!(default 1));
        assert_eq!(errors, ["expected `=` or `,` after `default`"]);
    }

    #[test]
    fn trailing_comma_is_fine() {
        let args = parse_ok(quote!(point = "p",));
        assert!(args.point.is_some());
    }

    #[test]
    fn fallback_and_default_both_parse() {
        // The contradiction is `validate`'s job; parsing keeps both with
        // their positions so it can point at the second.
        let args = parse_ok(quote!(default, fallback = f));
        assert_eq!(args.default.unwrap().position, 0);
        assert_eq!(args.fallback.unwrap().position, 1);
    }
}
