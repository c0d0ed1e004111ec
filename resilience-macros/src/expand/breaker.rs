//! Owns `#[breaker]`: the shared wrapping, entered through `enter_breaker`.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::Entry;
use crate::args::Kind;

/// Runs the pipeline for `#[breaker(ARGS)] ITEM`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    super::run(Kind::Breaker, args, item, enter)
}

// Input:  __resilience_point: &'static RT::Point, __resilience_permit: Option<RT::Permit>
//         (async: __resilience_pending: RT::Pending)
// Output: RT::enter_breaker(__resilience_point, &mut __resilience_permit)
//         (async: RT::enter_breaker_async(&mut __resilience_pending))
// With `key = ...` (KEY: the call's `RT::KeyArg`):
//         RT::enter_breaker_keyed(__resilience_point, &mut __resilience_permit, &KEY)
//         (async: RT::enter_breaker_async_keyed(&mut __resilience_pending, KEY))
pub(super) fn enter(
    private: &TokenStream,
    point: &Ident,
    entry: Entry<'_>,
    key: Option<&TokenStream>,
) -> TokenStream {
    match (entry, key) {
        (Entry::Sync(slot), None) => quote!(#private::enter_breaker(#point, &mut #slot)),
        (Entry::Async(guard), None) => quote!(#private::enter_breaker_async(&mut #guard)),
        (Entry::Sync(slot), Some(key)) => {
            quote!(#private::enter_breaker_keyed(#point, &mut #slot, &#key))
        }
        (Entry::Async(guard), Some(key)) => {
            quote!(#private::enter_breaker_async_keyed(&mut #guard, #key))
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    #[test]
    fn enters_through_the_breaker() {
        let out = super::expand(
            quote!(),
            quote!(
                fn f() {}
            ),
        )
        .to_string();
        assert!(
            out.contains(
                ":: resilience_runtime :: __private :: enter_breaker (__resilience_point , & mut __resilience_permit)"
            ),
            "{out}"
        );
        assert!(!out.contains("__private :: enter ("), "{out}");
    }

    #[test]
    fn messages_name_the_breaker() {
        let out = super::expand(
            quote!(),
            quote!(
                struct S;
            ),
        )
        .to_string();
        assert!(
            out.contains("`#[breaker]` can only be applied to functions"),
            "{out}"
        );
    }
}
