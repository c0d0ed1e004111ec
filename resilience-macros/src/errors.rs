//! The errors of one expansion, collected so that a single compile reports every
//! mistake (the argument parser's and the checks' alike).

/// Collects errors and folds them with `syn::Error::combine`.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(err),
            None => self.0 = Some(err),
        }
    }

    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.0
    }
}

/// What needs the runtime's `tokio` feature, and says so without it.
#[derive(Clone, Copy)]
pub(crate) enum NeedsTokio {
    /// `timeout = "..."`: `deadline!`.
    Timeout,
    /// `#[retry]` on an `async fn`: `retry_sleep!`.
    RetryAsync,
    /// `#[retry(hedge = "...")]`: `retry_hedge!`.
    Hedge,
}

impl NeedsTokio {
    // Output: { ::core::compile_error! { "`timeout = \"...\"` needs the `tokio` feature .." } }
    //
    // The first argument of the runtime's `deadline!` / `retry_sleep!` /
    // `retry_hedge!`, which expand it only without the `tokio` feature. Written here,
    // every token at `span` (the user's token), rather than raised by the runtime's
    // macro: an error raised there would come with a note naming that macro by its
    // path in the runtime's private module.
    pub(crate) fn error_at(self, span: proc_macro2::Span) -> proc_macro2::TokenStream {
        let (what, waits) = match self {
            NeedsTokio::Timeout => (
                "`timeout = \"...\"`",
                "which cuts the call with `tokio::time::timeout`",
            ),
            NeedsTokio::RetryAsync => (
                "`#[retry]` on an `async fn`",
                "which waits between attempts with `tokio::time::sleep`",
            ),
            NeedsTokio::Hedge => (
                "`#[retry(hedge = \"...\")]`",
                "which waits the hedge delay with `tokio::time::sleep`",
            ),
        };
        let error = syn::Error::new(
            span,
            format!(
                "{what} needs the `tokio` feature of resilience-runtime, {waits}: enable it \
                 in Cargo.toml, e.g. `resilience-runtime = {{ version = \"0.1\", features = \
                 [\"tokio\"] }}`"
            ),
        )
        .to_compile_error();
        let mut group = proc_macro2::Group::new(proc_macro2::Delimiter::Brace, error);
        group.set_span(span);
        quote::ToTokens::into_token_stream(group)
    }
}
