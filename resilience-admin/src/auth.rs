//! Tokens: the admin token for writes, app tokens for heartbeats, an optional read
//! token, all compared in constant time.

use crate::model::AppKey;
use std::fmt;

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// A secret token. Its `Debug` output never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Checks and wraps a token: at least [`MIN_TOKEN_LEN`] bytes of printable ASCII
    /// without spaces (it travels in an HTTP header).
    ///
    /// # Errors
    ///
    /// A message saying what is wrong, without the token.
    pub fn new(value: impl Into<String>) -> Result<Token, String> {
        let value = value.into();
        if value.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "a token must be at least {MIN_TOKEN_LEN} characters long (got {})",
                value.len()
            ));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token may only hold printable ASCII characters without spaces".into());
        }
        Ok(Token(value))
    }

    /// A new random token of 32 hex digits, from the operating system's generator.
    ///
    /// # Errors
    ///
    /// If `/dev/urandom` cannot be read.
    pub fn random() -> std::io::Result<Token> {
        use std::io::Read;
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token's text.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token, in time that depends only on the lengths.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        constant_time_eq(candidate, self.0.as_bytes())
    }
}

/// Compares two byte strings without an early exit: the time taken depends on the
/// length of `expected` only, not on where the first difference is.
pub fn constant_time_eq(candidate: &[u8], expected: &[u8]) -> bool {
    // Fold every byte pair into one accumulator; a length mismatch is folded in too,
    // and the loop always runs over the whole expected token.
    let mut diff = u8::from(candidate.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let c = candidate.get(i).copied().unwrap_or(!*e);
        diff |= c ^ e;
    }
    std::hint::black_box(diff) == 0
}

/// An app token: valid for every app, or only for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppToken {
    /// The app it is limited to, `None` for every app.
    pub scope: Option<AppKey>,
    /// The secret.
    pub token: Token,
}

impl AppToken {
    /// Parses `TOKEN` (every app) or `GROUP/APP=TOKEN` (one app).
    ///
    /// # Errors
    ///
    /// A message naming what is wrong (never the token itself).
    pub fn parse(spec: &str) -> Result<AppToken, String> {
        match spec.split_once('=') {
            Some((scope, token)) => {
                let (group, app) = scope
                    .split_once('/')
                    .ok_or_else(|| format!("app token scope `{scope}` must be GROUP/APP"))?;
                if group.is_empty() || app.is_empty() {
                    return Err(format!("app token scope `{scope}` must be GROUP/APP"));
                }
                Ok(AppToken {
                    scope: Some(AppKey::new(group, app)),
                    token: Token::new(token)?,
                })
            }
            None => Ok(AppToken {
                scope: None,
                token: Token::new(spec)?,
            }),
        }
    }
}

/// Every token the server accepts.
#[derive(Clone, Debug)]
pub struct Auth {
    /// Writes (policy edits and restores).
    pub admin: Token,
    /// Reads, if reads are protected; the admin token is accepted for reads too.
    pub read: Option<Token>,
    /// Heartbeats and pulls.
    pub apps: Vec<AppToken>,
}

/// Which right a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Right {
    /// Reading statistics and policies.
    Read,
    /// Changing policies.
    Write,
}

impl Auth {
    /// Whether the bearer token (if any) grants `right`.
    pub fn allows(&self, bearer: Option<&[u8]>, right: Right) -> bool {
        match right {
            Right::Read if self.read.is_none() => true,
            Right::Read => bearer.is_some_and(|b| {
                // Both compared, so timing does not tell which one matched.
                let admin = self.admin.matches(b);
                let read = self.read.as_ref().is_some_and(|t| t.matches(b));
                admin | read
            }),
            Right::Write => bearer.is_some_and(|b| self.admin.matches(b)),
        }
    }

    /// Whether the bearer token is an app token valid for `app`.
    pub fn allows_app(&self, bearer: Option<&[u8]>, app: &AppKey) -> bool {
        let Some(bearer) = bearer else {
            return false;
        };
        let mut ok = false;
        // Every token is compared, whatever the outcome.
        for t in &self.apps {
            let matches = t.token.matches(bearer);
            let in_scope = t.scope.as_ref().is_none_or(|s| s == app);
            ok |= matches & in_scope;
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"abcdefgh", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefgx", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefg", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefghi", b"abcdefgh"));
        assert!(!constant_time_eq(b"", b"abcdefgh"));
        // A candidate whose missing tail happens to be zero bytes must not match.
        assert!(!constant_time_eq(b"ab", b"ab\0\0"));
    }

    #[test]
    fn app_tokens_are_scoped() {
        let auth = Auth {
            admin: Token::new("admin-token-0123456789").unwrap(),
            read: None,
            apps: vec![
                AppToken::parse("shop/orders=orders-token-0123456789").unwrap(),
                AppToken::parse("any-app-token-0123456789").unwrap(),
            ],
        };
        let orders = AppKey::new("shop", "orders");
        let search = AppKey::new("shop", "search");
        assert!(auth.allows_app(Some(b"orders-token-0123456789"), &orders));
        assert!(!auth.allows_app(Some(b"orders-token-0123456789"), &search));
        assert!(auth.allows_app(Some(b"any-app-token-0123456789"), &search));
        assert!(!auth.allows_app(Some(b"admin-token-0123456789"), &search));
        assert!(!auth.allows_app(None, &search));
        assert!(auth.allows(None, Right::Read));
        assert!(!auth.allows(Some(b"any-app-token-0123456789"), Right::Write));
        assert!(auth.allows(Some(b"admin-token-0123456789"), Right::Write));
    }

    #[test]
    fn bad_token_specs_are_refused_without_echoing_the_secret() {
        let e = AppToken::parse("shop=secret-secret-secret").unwrap_err();
        assert!(e.contains("GROUP/APP"), "{e}");
        assert!(!e.contains("secret-secret"), "{e}");
        assert!(Token::new("short").unwrap_err().contains("16"));
        assert!(Token::new("has a space in it, long enough").is_err());
        assert_eq!(Token::random().unwrap().expose().len(), 32);
    }
}
