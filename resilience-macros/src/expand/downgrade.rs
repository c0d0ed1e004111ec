//! Owns `#[downgrade]`: the shared wrapping, entered through `Point::enter`'s
//! in-place form.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::Entry;
use crate::args::Kind;

/// Runs the pipeline for `#[downgrade(ARGS)] ITEM`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    super::run(Kind::Downgrade, args, item, enter)
}

// Input:  __resilience_point: &'static RT::Point, __resilience_permit: Option<RT::Permit>
//         (async: __resilience_pending: RT::Pending)
// Output: RT::enter(__resilience_point, &mut __resilience_permit)
//         (async: RT::enter_async(&mut __resilience_pending))
// With `key = ...` (KEY: the call's `RT::KeyArg`):
//         RT::enter_keyed(__resilience_point, &mut __resilience_permit, &KEY)
//         (async: RT::enter_async_keyed(&mut __resilience_pending, KEY))
pub(super) fn enter(
    private: &TokenStream,
    point: &Ident,
    entry: Entry<'_>,
    key: Option<&TokenStream>,
) -> TokenStream {
    match (entry, key) {
        (Entry::Sync(slot), None) => quote!(#private::enter(#point, &mut #slot)),
        (Entry::Async(guard), None) => quote!(#private::enter_async(&mut #guard)),
        (Entry::Sync(slot), Some(key)) => {
            quote!(#private::enter_keyed(#point, &mut #slot, &#key))
        }
        (Entry::Async(guard), Some(key)) => {
            quote!(#private::enter_async_keyed(&mut #guard, #key))
        }
    }
}
