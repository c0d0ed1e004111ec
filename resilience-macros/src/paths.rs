//! Owns the spelling of the runtime crate's path: no other module names `resilience_runtime`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};

/// The module of the runtime that generated code may call into, and nothing else.
///
/// Everything in it is an implementation detail of the macro/runtime pair. If
/// it ever gets a versioned name (`__private_0_1`, so that a mismatched pair
/// fails to compile), this is the one line to change.
const PRIVATE_MODULE: &str = "__private";

/// Where the runtime lives, as seen from the user's crate.
pub(crate) struct Runtime {
    root: TokenStream,
}

impl Runtime {
    /// The path given by `crate = "..."`, or `::resilience_runtime`.
    pub(crate) fn new(renamed: Option<&syn::Path>) -> Self {
        let root = match renamed {
            // The user's tokens keep their span, so a relative path such as
            // `crate::reexports::rt` resolves where the user wrote it.
            Some(path) => path.to_token_stream(),
            None => quote!(::resilience_runtime),
        };
        Runtime { root }
    }

    /// `<root>::__private`.
    pub(crate) fn private(&self) -> TokenStream {
        let root = &self.root;
        let module = proc_macro2::Ident::new(PRIVATE_MODULE, Span::call_site());
        quote!(#root::#module)
    }

    /// `<root>::__private` with every token at `span`.
    ///
    /// For calls whose type errors should point at a user token (the return
    /// type for `FromDowngraded`): rustc reports a path call at the span of
    /// the whole path, and a path mixing our call-site tokens with the
    /// user's would be reported at the whole attribute instead. Respanning is
    /// safe: `span` is a user token's, which resolves like `crate = "..."`'s
    /// literal or, for `::resilience_runtime`, like anywhere else.
    pub(crate) fn private_at(&self, span: Span) -> TokenStream {
        self.private()
            .into_iter()
            .map(|mut tt| {
                // A mod-style path has no groups, so a flat respan is complete.
                tt.set_span(span);
                tt
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_path_is_absolute() {
        let private = Runtime::new(None).private().to_string();
        assert_eq!(private, ":: resilience_runtime :: __private");
    }

    #[test]
    fn renamed_path_is_used_as_written() {
        let path: syn::Path = syn::parse_quote!(crate::rt);
        let private = Runtime::new(Some(&path)).private().to_string();
        assert_eq!(private, "crate :: rt :: __private");
    }
}
