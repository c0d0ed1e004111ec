//! Owns the spelling of the runtime crate's path: no other module names `resilience_runtime`.

use proc_macro2::TokenStream;
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
        let module = proc_macro2::Ident::new(PRIVATE_MODULE, proc_macro2::Span::call_site());
        quote!(#root::#module)
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
