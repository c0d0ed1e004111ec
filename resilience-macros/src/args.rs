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
//!           | "priority" "=" expr         // a `Priority`, over the arguments
//!           | "key" "=" expr              // the call's hot key, over the arguments
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

use crate::errors::Errors;

/// Custom keywords for the argument names (`crate` is a real keyword).
pub(crate) mod kw {
    syn::custom_keyword!(point);
    syn::custom_keyword!(fallback);
    syn::custom_keyword!(fallback_with_reason);
    syn::custom_keyword!(default);
    syn::custom_keyword!(is_exception);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(priority);
    syn::custom_keyword!(key);
}

/// Every argument name, for "did you mean".
const ARGS: [&str; 9] = [
    "point",
    "fallback",
    "fallback_with_reason",
    "default",
    "is_exception",
    "timeout",
    "priority",
    "key",
    "crate",
];

/// Every argument name, in the order diagnostics list them.
const EXPECTED: &str = "`point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, \
                        `timeout`, `priority`, `key`, `crate`";

/// Which attribute is being expanded; used in diagnostics.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Downgrade,
    Breaker,
    Retry,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Downgrade => "downgrade",
            Kind::Breaker => "breaker",
            Kind::Retry => "retry",
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
    /// The call's `Priority`, an expression over the arguments.
    pub(crate) priority: Option<Arg<Expr>>,
    /// The call's hot key (`keys` section of the policy), an expression over the
    /// arguments, evaluated once before the entry and borrowed.
    pub(crate) key: Option<Arg<Expr>>,
    pub(crate) krate: Option<Arg<Path>>,
    /// Not an argument: set when a `#[retry]` above expands this attribute, so that a
    /// refused (or cut) call marks its attempt as downgraded.
    pub(crate) mark_downgrade: bool,
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
        } else if input.peek(kw::priority) {
            let value = key_value::<kw::priority, _>(input, |input| input.parse::<Expr>())?;
            set_once(
                &mut self.priority,
                arg(key_span, position, value),
                "priority",
            )
        } else if input.peek(kw::key) {
            let value = key_value::<kw::key, _>(input, |input| input.parse::<Expr>())?;
            set_once(&mut self.key, arg(key_span, position, value), "key")
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
            let name = ident.to_string();
            let hint = match did_you_mean(&name, &ARGS) {
                Some(close) => format!("; did you mean `{close}`?"),
                None => String::new(),
            };
            Err(syn::Error::new(
                ident.span(),
                format!("unknown argument `{name}`, expected one of {EXPECTED}{hint}"),
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

/// `"orders::get"`: a non-blank string literal.
fn point_name(input: ParseStream<'_>) -> syn::Result<LitStr> {
    let lit = string_literal(input, "point = \"orders::get\"")?;
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "`point` must not be empty or only whitespace",
        ));
    }
    // The runtime's rule (`check_point_name`, the same file), checked here so that
    // the generated lookup cannot fail: the runtime and the admin console refuse
    // these too.
    match crate::name::NameProblem::of(&lit.value()) {
        Some(problem) => Err(syn::Error::new(
            lit.span(),
            format!("`point` {}", problem.text()),
        )),
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

/// The next expression, seen through the invisible groups that a `macro_rules!`
/// fragment (`$name:literal`, `$f:path`, `$e:expr`) wraps its tokens in, so that an
/// attribute written inside a declarative macro reads as one written by hand.
fn bare_expr(input: ParseStream<'_>) -> syn::Result<Expr> {
    let mut expr = input.parse::<Expr>()?;
    while let Expr::Group(group) = expr {
        expr = *group.expr;
    }
    Ok(expr)
}

/// A string literal without suffix; anything else is an error at that token.
fn string_literal(input: ParseStream<'_>, example: &str) -> syn::Result<LitStr> {
    // Parse a whole expression so that `point = a::b` or `point = 1 + 2` is
    // reported as one span rather than as a confusing follow-up error.
    match bare_expr(input)? {
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
    match bare_expr(input)? {
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

// ---- `#[retry(...)]` ----
//
// args := (arg ("," arg)* ","?)?
// arg  := "point" "=" LitStr | "attempts" "=" LitInt | "backoff" "=" LitStr
//       | "base" "=" LitStr | "max" "=" LitStr | "multiplier" "=" LitFloat
//       | "jitter" "=" LitStr | "retry_if" "=" path | "budget" "=" LitStr
//       | "hedge" "=" LitStr | "crate" "=" LitStr

/// Every argument of `#[retry]`, in the order diagnostics list them.
const RETRY_ARGS: [&str; 11] = [
    "point",
    "attempts",
    "backoff",
    "base",
    "max",
    "multiplier",
    "jitter",
    "retry_if",
    "budget",
    "hedge",
    "crate",
];

/// `hedge = "30ms"` or `hedge = "p95"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Hedge {
    /// A fixed delay, in nanoseconds.
    Fixed(u64),
    /// A percentile of the site's attempt latencies, in tenths (500 ..= 999).
    Percentile(u32),
}

/// The parsed arguments of `#[retry]`.
#[derive(Default)]
pub(crate) struct RetryArgs {
    pub(crate) point: Option<Arg<LitStr>>,
    pub(crate) attempts: Option<Arg<u32>>,
    /// `true` for `"exponential"`.
    pub(crate) exponential: Option<Arg<bool>>,
    pub(crate) base: Option<Arg<u64>>,
    pub(crate) max: Option<Arg<u64>>,
    pub(crate) multiplier: Option<Arg<f64>>,
    pub(crate) jitter: Option<Arg<f64>>,
    pub(crate) retry_if: Option<Arg<ExprPath>>,
    pub(crate) budget: Option<Arg<LitStr>>,
    pub(crate) hedge: Option<Arg<Hedge>>,
    pub(crate) krate: Option<Arg<Path>>,
}

impl RetryArgs {
    /// Parses `#[retry]`'s arguments, reporting every mistake (as [`Args::parse`]).
    pub(crate) fn parse(tokens: TokenStream) -> (RetryArgs, Option<syn::Error>) {
        let mut args = RetryArgs::default();
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
        if let Some(Arg { value: false, .. }) = &args.exponential {
            for (arg, name) in [
                (args.max.as_ref().map(|a| a.key_span), "max"),
                (args.multiplier.as_ref().map(|a| a.key_span), "multiplier"),
            ] {
                if let Some(span) = arg {
                    errors.push(syn::Error::new(
                        span,
                        format!("`{name}` needs `backoff = \"exponential\"`; a fixed backoff waits `base` every time"),
                    ));
                }
            }
        }
        if let (Some(base), Some(max)) = (&args.base, &args.max) {
            if max.value < base.value {
                errors.push(syn::Error::new(
                    max.key_span,
                    "`max` must be at least `base`",
                ));
            }
        }
        (args, errors.finish())
    }

    fn parse_one(&mut self, input: ParseStream<'_>, position: usize) -> syn::Result<()> {
        let key_span = input.span();
        if input.peek(Token![crate]) {
            let value = key_value::<Token![crate], _>(input, crate_path)?;
            return set_once(&mut self.krate, arg(key_span, position, value), "crate");
        }
        let ident = input
            .call(Ident::parse_any)
            .map_err(|_| input.error(format!("expected one of {}", retry_expected())))?;
        let name = ident.to_string();
        if name == "key" {
            return Err(syn::Error::new(
                ident.span(),
                "`key` is not an argument of `#[retry]`: a hot key limits the calls of a \
                 point; put `key = ...` on the `#[downgrade]` or `#[breaker]` stacked with \
                 `#[retry]` (below it, every attempt is then a call of that key)",
            ));
        }
        if !RETRY_ARGS.contains(&name.as_str()) || name == "crate" {
            let hint = match did_you_mean(&name, &RETRY_ARGS) {
                Some(close) => format!("; did you mean `{close}`?"),
                None => String::new(),
            };
            return Err(syn::Error::new(
                ident.span(),
                format!(
                    "unknown argument `{name}`, expected one of {}{hint}",
                    retry_expected()
                ),
            ));
        }
        input.parse::<Token![=]>()?;
        match name.as_str() {
            "point" => set_once(
                &mut self.point,
                arg(key_span, position, point_name(input)?),
                "point",
            ),
            "attempts" => set_once(
                &mut self.attempts,
                arg(key_span, position, attempts(input)?),
                "attempts",
            ),
            "backoff" => {
                let lit = string_literal(input, "backoff = \"exponential\"")?;
                let exponential = match lit.value().as_str() {
                    "exponential" => true,
                    "fixed" => false,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                            "unknown backoff `{other}`, expected `\"fixed\"` or `\"exponential\"`"
                        ),
                        ))
                    }
                };
                set_once(
                    &mut self.exponential,
                    arg(key_span, position, exponential),
                    "backoff",
                )
            }
            "base" => set_once(
                &mut self.base,
                arg(key_span, position, wait(input, "base")?),
                "base",
            ),
            "max" => set_once(
                &mut self.max,
                arg(key_span, position, wait(input, "max")?),
                "max",
            ),
            "multiplier" => set_once(
                &mut self.multiplier,
                arg(key_span, position, multiplier(input)?),
                "multiplier",
            ),
            "jitter" => {
                let lit = string_literal(input, "jitter = \"full\"")?;
                let jitter = match lit.value().as_str() {
                    "none" => 0.0,
                    "equal" => 0.5,
                    "full" => 1.0,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!("unknown jitter `{other}`, expected `\"none\"`, `\"equal\"` or `\"full\"`"),
                        ))
                    }
                };
                set_once(&mut self.jitter, arg(key_span, position, jitter), "jitter")
            }
            "retry_if" => {
                let path = function_path(input, "retry_if = is_transient")?;
                set_once(
                    &mut self.retry_if,
                    arg(key_span, position, path),
                    "retry_if",
                )
            }
            "budget" => {
                let lit = string_literal(input, "budget = \"backend\"")?;
                if lit.value().trim().is_empty() {
                    return Err(syn::Error::new(lit.span(), "`budget` must not be empty"));
                }
                set_once(&mut self.budget, arg(key_span, position, lit), "budget")
            }
            "hedge" => set_once(
                &mut self.hedge,
                arg(key_span, position, hedge(input)?),
                "hedge",
            ),
            _ => unreachable!("every name in RETRY_ARGS is handled"),
        }
    }
}

fn retry_expected() -> String {
    RETRY_ARGS
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The closest of `candidates` to `name` (an edit distance of at most a third of
/// its length, at least 1), for "did you mean".
pub(crate) fn did_you_mean<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The runtime's `MAX_ATTEMPTS`.
const MAX_ATTEMPTS: u32 = 100;

/// `3`: an integer literal in 1..=100.
fn attempts(input: ParseStream<'_>) -> syn::Result<u32> {
    match bare_expr(input)? {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) => match lit.base10_parse::<u32>() {
            Ok(n) if (1..=MAX_ATTEMPTS).contains(&n) => Ok(n),
            _ => Err(syn::Error::new(
                lit.span(),
                format!("`attempts` must be in 1..={MAX_ATTEMPTS} (the first attempt included)"),
            )),
        },
        other => Err(syn::Error::new_spanned(
            other,
            "expected an integer literal, e.g. `attempts = 3`",
        )),
    }
}

/// `2.0`: a float (or integer) literal, finite and at least 1.
fn multiplier(input: ParseStream<'_>) -> syn::Result<f64> {
    let (value, span) = match bare_expr(input)? {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Float(lit),
            ..
        }) => (lit.base10_parse::<f64>()?, lit.span()),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) => (lit.base10_parse::<f64>()?, lit.span()),
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "expected a number, e.g. `multiplier = 2.0`",
            ))
        }
    };
    if value.is_finite() && value >= 1.0 {
        Ok(value)
    } else {
        Err(syn::Error::new(
            span,
            "`multiplier` must be a finite number >= 1",
        ))
    }
}

/// What `hedge` takes, for its errors.
const HEDGE_EXPECTED: &str = "expected a delay (`hedge = \"30ms\"`) or a percentile of \
    this call site's attempt latencies from `\"p50\"` to `\"p99.9\"` (`hedge = \"p95\"`)";

/// `"30ms"` (as `base`) or `"p95"` (`p50` ..= `p99.9`, at most one decimal).
fn hedge(input: ParseStream<'_>) -> syn::Result<Hedge> {
    let lit = string_literal(input, "hedge = \"30ms\"")?;
    let text = lit.value();
    let error = |problem: String| syn::Error::new(lit.span(), problem);
    if let Some(number) = text.trim().strip_prefix('p') {
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !(fraction.is_empty() || fraction.len() == 1 && digits(fraction)) {
            return Err(error(format!("unknown hedge `{text}`: {HEDGE_EXPECTED}")));
        }
        let tenths = whole
            .parse::<u32>()
            .ok()
            .and_then(|w| w.checked_mul(10))
            .map(|w| w + fraction.parse::<u32>().unwrap_or(0));
        return match tenths {
            Some(t) if (500..=999).contains(&t) => Ok(Hedge::Percentile(t)),
            _ => Err(error(format!(
                "the hedge percentile must be from `p50` to `p99.9`, got `{text}`"
            ))),
        };
    }
    if !text
        .trim()
        .starts_with(|c: char| c.is_ascii_digit() || c == '.')
    {
        return Err(error(format!("unknown hedge `{text}`: {HEDGE_EXPECTED}")));
    }
    match parse_duration(&text) {
        Ok(0) => Err(error("`hedge` must be greater than zero".to_owned())),
        Ok(nanos) if nanos > MAX_TIMEOUT_NS => Err(error(
            "`hedge` must be at most one day (`\"24h\"`)".to_owned(),
        )),
        Ok(nanos) => Ok(Hedge::Fixed(nanos)),
        Err(problem) => Err(error(
            problem.replace("`timeout = \"200ms\"`", "`hedge = \"30ms\"`"),
        )),
    }
}

/// `"50ms"`: a duration greater than zero and at most a day (as `timeout`).
fn wait(input: ParseStream<'_>, name: &str) -> syn::Result<u64> {
    let lit = string_literal(input, &format!("{name} = \"50ms\""))?;
    match parse_duration(&lit.value()) {
        Ok(0) => Err(syn::Error::new(
            lit.span(),
            format!("`{name}` must be greater than zero"),
        )),
        Ok(nanos) if nanos > MAX_TIMEOUT_NS => Err(syn::Error::new(
            lit.span(),
            format!("`{name}` must be at most one day (`\"24h\"`)"),
        )),
        Ok(nanos) => Ok(nanos),
        Err(problem) => Err(syn::Error::new(
            lit.span(),
            problem.replace("`timeout = \"200ms\"`", &format!("`{name} = \"50ms\"`")),
        )),
    }
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

    /// What `$x:literal`, `$x:path` or `$x:expr` hands on: the tokens in a group with
    /// no delimiter.
    fn invisible(tokens: TokenStream) -> TokenStream {
        proc_macro2::Group::new(proc_macro2::Delimiter::None, tokens).into_token_stream()
    }

    #[test]
    fn arguments_from_a_declarative_macro_read_as_written_by_hand() {
        let (point, fallback, timeout) = (
            invisible(quote!("orders::get")),
            invisible(quote!(Self::cached)),
            invisible(quote!("200ms")),
        );
        let args = parse_ok(quote!(point = #point, fallback = #fallback, timeout = #timeout));
        assert_eq!(args.point.unwrap().value.value(), "orders::get");
        assert_eq!(
            args.fallback.unwrap().value.to_token_stream().to_string(),
            quote!(Self::cached).to_string()
        );
        assert_eq!(args.timeout.unwrap().value.nanos, 200_000_000);

        let (attempts, multiplier, retry_if) = (
            invisible(quote!(4)),
            invisible(quote!(1.5)),
            invisible(invisible(quote!(is_transient))),
        );
        let (args, errors) = RetryArgs::parse(quote!(
            attempts = #attempts,
            multiplier = #multiplier,
            retry_if = #retry_if,
        ));
        assert!(errors.is_none(), "{errors:?}");
        assert_eq!(args.attempts.unwrap().value, 4);
        assert!((args.multiplier.unwrap().value - 1.5).abs() < f64::EPSILON);
        assert_eq!(
            args.retry_if.unwrap().value.to_token_stream().to_string(),
            "is_transient"
        );

        // What is wrong by hand is wrong through a macro, with the same message.
        let number = invisible(quote!(42));
        let (args, errors) = parse(quote!(point = #number));
        assert_eq!(
            errors,
            ["expected a string literal, e.g. `point = \"orders::get\"`"]
        );
        assert!(args.point.is_none());
    }

    #[test]
    fn retry_arguments() {
        let (args, errors) = RetryArgs::parse(quote!(
            attempts = 4,
            backoff = "fixed",
            base = "20ms",
            jitter = "equal",
            retry_if = is_transient,
            budget = "db",
            point = "p",
        ));
        assert!(errors.is_none());
        assert_eq!(args.attempts.unwrap().value, 4);
        assert!(!args.exponential.unwrap().value);
        assert_eq!(args.base.unwrap().value, 20_000_000);
        assert!((args.jitter.unwrap().value - 0.5).abs() < f64::EPSILON);
        assert_eq!(args.budget.unwrap().value.value(), "db");
    }

    #[test]
    fn retry_mistakes() {
        let messages = |tokens| {
            RetryArgs::parse(tokens)
                .1
                .map(|e| e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let unknown = messages(quote!(atempts = 3));
        assert_eq!(unknown.len(), 1);
        assert!(
            unknown[0].ends_with("did you mean `attempts`?"),
            "{unknown:?}"
        );
        assert!(!messages(quote!(fallback = f))[0].contains("did you mean"));
        assert_eq!(
            messages(quote!(attempts = 0, base = "1s", max = "1ms")),
            [
                "`attempts` must be in 1..=100 (the first attempt included)",
                "`max` must be at least `base`",
            ]
        );
        assert_eq!(
            messages(quote!(jitter = "half", jitter = "full")),
            ["unknown jitter `half`, expected `\"none\"`, `\"equal\"` or `\"full\"`",]
        );
        assert_eq!(
            messages(quote!(budget = "a", budget = "b")),
            ["duplicate argument `budget`"]
        );
    }

    #[test]
    fn hedge_values() {
        let hedge = |tokens| {
            let (args, errors) = RetryArgs::parse(tokens);
            match errors {
                None => Ok(args.hedge.unwrap().value),
                Some(e) => Err(e.to_string()),
            }
        };
        assert_eq!(hedge(quote!(hedge = "30ms")), Ok(Hedge::Fixed(30_000_000)));
        assert_eq!(hedge(quote!(hedge = "p95")), Ok(Hedge::Percentile(950)));
        assert_eq!(hedge(quote!(hedge = "p99.9")), Ok(Hedge::Percentile(999)));
        assert_eq!(hedge(quote!(hedge = "p50")), Ok(Hedge::Percentile(500)));
        for bad in ["p101", "p49.9", "p100"] {
            let e = hedge(quote!(hedge = #bad)).unwrap_err();
            assert!(e.contains("`p50` to `p99.9`"), "{bad}: {e}");
        }
        for bad in ["fast", "p", "p9x", "p99.99", "", "0ms"] {
            assert!(hedge(quote!(hedge = #bad)).is_err(), "{bad}");
        }
        assert!(hedge(quote!(hedge = "fast"))
            .unwrap_err()
            .starts_with("unknown hedge `fast`"));
        assert_eq!(
            hedge(quote!(hedge = "1ms", hedge = "2ms")).unwrap_err(),
            "duplicate argument `hedge`"
        );
    }

    #[test]
    fn key_is_any_expression() {
        for key in [
            quote!(user_id),
            quote!(req.tenant),
            quote!(req.tenant()),
            quote!(&*name),
            quote!(self.shard),
            quote!(format!("{a}-{b}")),
        ] {
            let args = parse_ok(quote!(key = #key, default));
            let parsed = args.key.unwrap();
            assert_eq!(parsed.value.to_token_stream().to_string(), key.to_string());
            assert_eq!(parsed.position, 0);
            assert!(args.default.is_some());
        }
        let (args, errors) = parse(quote!(key = a, key = b));
        assert_eq!(errors, ["duplicate argument `key`"]);
        assert_eq!(args.key.unwrap().value.to_token_stream().to_string(), "a");
        let (_, errors) = parse(quote!(keys = a));
        assert!(errors[0].ends_with("did you mean `key`?"), "{errors:?}");
    }

    #[test]
    fn retry_says_where_a_key_goes() {
        let (_, errors) = RetryArgs::parse(quote!(attempts = 2, key = user));
        let errors: Vec<_> = errors.unwrap().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("`key` is not an argument of `#[retry]`"),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("on the `#[downgrade]` or `#[breaker]`"),
            "{errors:?}"
        );
    }

    #[test]
    fn did_you_mean_is_close_only() {
        assert_eq!(did_you_mean("retryif", &RETRY_ARGS), Some("retry_if"));
        assert_eq!(did_you_mean("mutliplier", &RETRY_ARGS), Some("multiplier"));
        assert_eq!(did_you_mean("timeout", &RETRY_ARGS), None);
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
            (quote!(key = a, key = b.c()), "key"),
            (quote!(priority = a, priority = b), "priority"),
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
            ["unknown argument `fallbak`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `priority`, `key`, `crate`; did you mean `fallback`?"]
        );
        // Parsing went on after the bad argument.
        assert_eq!(args.point.unwrap().value.value(), "p");
    }

    #[test]
    fn unknown_keyword_argument() {
        let (_, errors) = parse(quote!(type = u8));
        assert_eq!(
            errors,
            ["unknown argument `type`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `priority`, `key`, `crate`"]
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
                "unknown argument `fallbak`, expected one of `point`, `fallback`, `fallback_with_reason`, `default`, `is_exception`, `timeout`, `priority`, `key`, `crate`; did you mean `fallback`?",
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
