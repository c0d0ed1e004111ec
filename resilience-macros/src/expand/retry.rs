//! Owns `#[retry]`: the whole function runs up to `attempts` times, an `Err` that
//! `retry_if` chooses is retried after a backoff.
//!
//! Stacking: a `#[downgrade]` / `#[breaker]` written below `#[retry]` is expanded here,
//! inside the retry loop, so every attempt is a call of that point, and a refused (or
//! cut) attempt marks itself downgraded (`RT::mark_downgraded`), which ends the call at
//! once with that attempt's result. A `#[retry]` below a `#[downgrade]` / `#[breaker]`
//! is expanded by that attribute first (see [`absorb_below`]): the point sees one
//! call, the retries happen inside it.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::{FnArg, LitStr, Pat, ReturnType, Type};

use super::{at_user_token, ident, rebind_patterns, ReturnKind, Shape};
use crate::args::{Args, Hedge, Kind, RetryArgs};
use crate::errors::{Errors, NeedsTokio};
use crate::item::ItemFn;
use crate::paths::Runtime;
use crate::validate;

/// Runs the pipeline for `#[retry(ARGS)] ITEM`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand_checked(args, item, TokenStream::new()) {
        Ok(out) | Err(out) => out,
    }
}

/// The last segment of an attribute's path: `downgrade` in `#[rt::downgrade(..)]`.
fn attr_name(attr: &syn::Attribute) -> Option<String> {
    attr.path().segments.last().map(|s| s.ident.to_string())
}

/// The tokens inside an attribute's parentheses (none for `#[retry]`).
fn attr_args(attr: &syn::Attribute) -> syn::Result<TokenStream> {
    match &attr.meta {
        syn::Meta::Path(_) => Ok(TokenStream::new()),
        syn::Meta::List(list) => Ok(list.tokens.clone()),
        syn::Meta::NameValue(nv) => Err(syn::Error::new_spanned(
            nv,
            "expected `#[attr]` or `#[attr(..)]`",
        )),
    }
}

/// For `#[downgrade]` / `#[breaker]`: if a `#[retry]` is written below, expands it now
/// (with whatever is below it), so that it runs inside the point.
pub(crate) fn absorb_below(item: TokenStream) -> Result<TokenStream, TokenStream> {
    let Ok(mut parsed) = ItemFn::parse(item.clone(), Kind::Downgrade) else {
        return Ok(item);
    };
    let Some(index) = parsed
        .attrs
        .iter()
        .position(|a| attr_name(a).as_deref() == Some("retry"))
    else {
        return Ok(item);
    };
    let attr = parsed.attrs.remove(index);
    // The attributes between this one and `#[retry]` stay outside, expanded after.
    let outside: Vec<syn::Attribute> = parsed.attrs.drain(..index).collect();
    let args = attr_args(&attr).map_err(|e| {
        let e = e.to_compile_error();
        quote!(#item #e)
    })?;
    let inner = expand_checked(args, super::emit(&parsed, None), used(&[attr]))?;
    Ok(quote!(#(#outside)* #inner))
}

/// `use PATH as _;` for each attribute expanded here rather than by rustc, so that
/// its import (`use resilience_runtime::breaker;`) still counts as used.
fn used(attrs: &[syn::Attribute]) -> TokenStream {
    let paths = attrs.iter().map(syn::Attribute::path);
    quote!(#(#[allow(unused_imports)] use #paths as _;)*)
}

fn expand_checked(
    args: TokenStream,
    item: TokenStream,
    uses: TokenStream,
) -> Result<TokenStream, TokenStream> {
    let mut errors = Errors::default();
    let (args, args_error) = RetryArgs::parse(args);
    if let Some(err) = args_error {
        errors.push(err);
    }
    let parsed = match ItemFn::parse(item.clone(), Kind::Retry) {
        Ok(parsed) => {
            validate_retry(&parsed, &mut errors);
            validate_hedge(&args, &parsed, &mut errors);
            Some(parsed)
        }
        Err(err) => {
            errors.push(err);
            None
        }
    };
    let fail = |err: syn::Error| {
        let err = err.to_compile_error();
        quote!(#item #err)
    };
    if let Some(err) = errors.finish() {
        return Err(fail(err));
    }
    let Some(mut parsed) = parsed else {
        return Err(item);
    };

    // The `#[downgrade]` / `#[breaker]` below run inside the loop, marked.
    let (stacked, rest): (Vec<_>, Vec<_>) = parsed
        .attrs
        .drain(..)
        .partition(|a| matches!(attr_name(a).as_deref(), Some("downgrade" | "breaker")));
    parsed.attrs = rest;
    let stacked_paths: Vec<syn::Path> = stacked.iter().map(|a| a.path().clone()).collect();
    let mut inner_point: Option<LitStr> = None;
    let mut current = super::emit(&parsed, None);
    for attr in &stacked {
        let tokens = attr_args(attr).map_err(fail)?;
        if inner_point.is_none() {
            inner_point = Args::parse(tokens.clone()).0.point.map(|p| p.value);
        }
        let (kind, enter): (Kind, super::Enter) = match attr_name(attr).as_deref() {
            Some("breaker") => (Kind::Breaker, super::breaker::enter),
            _ => (Kind::Downgrade, super::downgrade::enter),
        };
        current = super::run_marked(kind, tokens, current, enter, true)?;
    }
    let item = match ItemFn::parse(current.clone(), Kind::Retry) {
        Ok(item) => item,
        Err(_) => return Err(current),
    };
    let uses = quote!(#uses #(#[allow(unused_imports)] use #stacked_paths as _;)*);
    Ok(wrap(&args, item, inner_point, &uses, !stacked.is_empty()))
}

/// What only `#[retry]` needs of the signature.
fn validate_retry(item: &ItemFn, errors: &mut Errors) {
    validate::validate(Kind::Retry, &Args::default(), item, errors);
    let sig = &item.sig;
    let split = item.body.split();
    if split
        .as_ref()
        .is_some_and(|split| matches!(Shape::of(sig, split), Shape::Boxed { .. }))
    {
        errors.push(syn::Error::new(
            sig.ident.span(),
            "`#[retry]` does not support `#[async_trait]` methods; retry inside the method",
        ));
    }
    for input in &sig.inputs {
        if let FnArg::Receiver(receiver) = input {
            if receiver.reference.is_none() {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "a `#[retry]` method cannot take `self` by value: each attempt needs it \
                     again; take `&self`",
                ));
            }
        }
    }
    if let Some(err) = not_a_result(sig) {
        errors.push(err);
    }
}

/// The return types that cannot be a `Result` whatever they name: none, `()`, a
/// tuple, `!`, and the `impl Future` of a sync fn. Any other type is rustc's to judge
/// through `Fallible` (an alias such as `io::Result<T>` is a `Result`).
fn not_a_result(sig: &syn::Signature) -> Option<syn::Error> {
    const NEEDS: &str = "`#[retry]` needs a function that returns `Result<T, E>`";
    let ty = match &sig.output {
        ReturnType::Default => {
            return Some(syn::Error::new(
                sig.ident.span(),
                format!(
                    "{NEEDS}: only an `Err` is retried, and `{}` returns nothing; return \
                     `Result<(), E>` where `E` is the error to retry, or remove `#[retry]`",
                    sig.ident
                ),
            ));
        }
        ReturnType::Type(_, ty) => &**ty,
    };
    let message = match ty {
        Type::Tuple(tuple) => {
            let (not, ok) = match tuple.elems.is_empty() {
                true => ("`()`", "()"),
                false => ("a tuple", "(..)"),
            };
            format!(
                "{NEEDS}, not {not}: only an `Err` is retried; return `Result<{ok}, E>` \
                 where `E` is the error to retry, or remove `#[retry]`"
            )
        }
        Type::Never(_) => format!(
            "{NEEDS}, not `!`: a function that never returns has no `Err` to retry; remove \
             `#[retry]`"
        ),
        Type::ImplTrait(bounds) if sig.asyncness.is_none() && names_future(bounds) => format!(
            "`#[retry]` cannot retry the future that a sync fn returns: each attempt must \
             run the call again; write `async fn {}(..) -> Result<T, E>` instead",
            sig.ident
        ),
        _ => return None,
    };
    Some(syn::Error::new_spanned(ty, message))
}

/// Whether `impl ..` names `Future` among its bounds (`impl Future<Output = R> + Send`).
fn names_future(bounds: &syn::TypeImplTrait) -> bool {
    bounds.bounds.iter().any(|bound| match bound {
        syn::TypeParamBound::Trait(bound) => bound
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "Future"),
        _ => false,
    })
}

/// What `hedge` needs: an `async fn` (attempts at once), no `&mut` argument (they
/// cannot share it), and attempts to hedge with.
fn validate_hedge(args: &RetryArgs, item: &ItemFn, errors: &mut Errors) {
    let Some(hedge) = &args.hedge else { return };
    let sig = &item.sig;
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            hedge.key_span,
            format!(
                "`hedge` needs an `async fn`: hedged attempts run at the same time, polled \
                 together in the caller's task, and a sync fn can run only one attempt at a \
                 time; make `{}` async, or remove `hedge` to retry it one attempt after another",
                sig.ident
            ),
        ));
    }
    for input in &sig.inputs {
        let (shared, what, instead) = match input {
            FnArg::Receiver(receiver) => (
                receiver.reference.is_some() && receiver.mutability.is_some(),
                "`&mut self`".to_owned(),
                "take `&self` (with interior mutability for what attempts change)",
            ),
            FnArg::Typed(typed) => (
                matches!(&*typed.ty, Type::Reference(r) if r.mutability.is_some()),
                match &*typed.pat {
                    Pat::Ident(pat) => format!("the `&mut` argument `{}`", pat.ident),
                    _ => "a `&mut` argument".to_owned(),
                },
                "pass it by value (each attempt gets a clone) or by shared reference",
            ),
        };
        if shared {
            let at: &dyn ToTokens = match input {
                FnArg::Receiver(receiver) => receiver,
                FnArg::Typed(typed) => &typed.ty,
            };
            errors.push(syn::Error::new_spanned(
                at,
                format!(
                    "`hedge` runs several attempts at once, which cannot share {what}; \
                     {instead}, or remove `hedge`"
                ),
            ));
        }
    }
    if let Some(attempts) = args.attempts.as_ref().filter(|a| a.value < 2) {
        errors.push(syn::Error::new(
            attempts.key_span,
            "`hedge` needs `attempts` of at least 2: hedged attempts count as attempts",
        ));
    }
}

// Input:  #[retry(attempts = 3, retry_if = pred)] fn get(&self, id: Id, name: &str) -> R { BODY }
// Output: fn get(&self, id: Id, name: &str) -> R {
//             let __resilience_retry_point = { static ..: RT::StaticPoint = ..; .. };
//             let __resilience_budget = None | Some({ static ..: RT::StaticBudget = ..; .. });
//             static __RESILIENCE_RETRY: RT::RetrySpec = RT::RetrySpec { .. };
//             let mut __resilience_retrying = RT::Retrying::begin(point, budget);
//             loop {
//                 let id = RT::RetryArgument::clone_for_attempt(&id);   // at `id`: "not Clone" there
//                 let (__resilience_out, __resilience_refused) =
//                     RT::attempt(|| { PIN LETS BODY });     // async: RT::attempt_async(async { .. }).await
//                 let __resilience_again: bool = !refused && DECIDE;         // see `decide`
//                 if !__resilience_again { return __resilience_out; }
//                 match RT::Retrying::failed(&mut retrying, &__RESILIENCE_RETRY) {
//                     Some(wait) => RT::Retrying::sleep(&retrying, wait),
//                                   // async: RT::retry_sleep!({ NEEDS_TOKIO } &retrying, wait).await
//                     None => return __resilience_out,
//                 }
//             }
//         }
// References are not cloned (`&T` is copied, `&mut T` reborrowed); BODY is the user's
// block, or what the `#[downgrade]` / `#[breaker]` below made of it.
fn wrap(
    args: &RetryArgs,
    mut item: ItemFn,
    inner_point: Option<LitStr>,
    uses: &TokenStream,
    marked: bool,
) -> TokenStream {
    let Some(split) = item.body.split() else {
        return super::emit(&item, None);
    };
    let shape = Shape::of(&item.sig, &split);
    let inner_attrs = &split.inner_attrs;
    let mut block = split.block.clone();
    block.set_span(at_user_token(block.span()));

    let runtime = Runtime::new(args.krate.as_ref().map(|k| &k.value));
    let private = runtime.private();
    let rebound = rebind_patterns(&mut item.sig);
    let lets = &rebound.lets;
    let output = ReturnKind::of(&item.sig);
    let pin = output.pin();

    // One fresh copy of each argument per attempt.
    let mut copies = Vec::new();
    for input in &mut item.sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let Pat::Ident(pat) = &mut *typed.pat else {
            continue;
        };
        let mutability = pat.mutability.take();
        let name = &pat.ident;
        let span = at_user_token(name.span());
        match &*typed.ty {
            Type::Reference(reference) if reference.mutability.is_some() => {
                copies.push(quote!(let #mutability #name = &mut *#name;));
            }
            Type::Reference(_) => {
                if mutability.is_some() {
                    copies.push(quote!(let #mutability #name = #name;));
                }
            }
            _ => {
                let at = runtime.private_at(span);
                let call = quote_spanned!(span=> #at::RetryArgument::clone_for_attempt(&#name));
                copies.push(quote!(let #mutability #name = #call;));
            }
        }
    }

    let name = match (&args.point, &inner_point) {
        (Some(point), _) => point.value.to_token_stream(),
        (None, Some(point)) => point.to_token_stream(),
        (None, None) => {
            use syn::ext::IdentExt as _;
            let fn_name = LitStr::new(&item.sig.ident.unraw().to_string(), item.sig.ident.span());
            quote!(::core::concat!(::core::module_path!(), "::", #fn_name))
        }
    };
    let point_cell = ident("__RESILIENCE_RETRY_POINT");
    let handle = quote!({
        static #point_cell: #private::StaticPoint = #private::StaticPoint::new(#name);
        #private::StaticPoint::get(&#point_cell)
    });
    let budget = match &args.budget {
        Some(budget) => {
            let cell = ident("__RESILIENCE_BUDGET");
            let name = &budget.value;
            quote!(::core::option::Option::Some({
                static #cell: #private::StaticBudget = #private::StaticBudget::new(#name);
                #private::StaticBudget::get(&#cell)
            }))
        }
        None => quote!(::core::option::Option::None),
    };
    let attempts = args.attempts.as_ref().map_or(3, |a| a.value);
    let exponential = args.exponential.as_ref().is_none_or(|a| a.value);
    let base = args.base.as_ref().map_or(50_000_000, |a| a.value);
    let max = args
        .max
        .as_ref()
        .map_or(2_000_000_000u64.max(base), |a| a.value);
    let multiplier = args.multiplier.as_ref().map_or(2.0, |a| a.value);
    let jitter = args.jitter.as_ref().map_or(1.0, |a| a.value);
    let attempts = proc_macro2::Literal::u64_suffixed(u64::from(attempts));
    let base = proc_macro2::Literal::u64_suffixed(base);
    let max = proc_macro2::Literal::u64_suffixed(max);
    let multiplier = proc_macro2::Literal::f64_suffixed(multiplier);
    let jitter = proc_macro2::Literal::f64_suffixed(jitter);

    let point = ident("__resilience_retry_point");
    let budget_var = ident("__resilience_budget");
    let spec = ident("__RESILIENCE_RETRY");
    let retrying = ident("__resilience_retrying");
    let out = ident("__resilience_out");
    let refused = ident("__resilience_refused");
    let again = ident("__resilience_again");
    let wait = ident("__resilience_wait");

    let decide = decide(&runtime, args, &item.sig);
    // Only an attribute stacked below marks an attempt downgraded; without one the
    // attempt needs no scope for the mark (a retrying fn called in the body keeps its
    // own).
    let (attempt, sleep) = match shape.await_span() {
        None => (
            if marked {
                quote!(#private::attempt(|| { #pin #(#lets)* #block }))
            } else {
                quote!(#private::attempt_unmarked(|| { #pin #(#lets)* #block }))
            },
            quote!(#private::Retrying::sleep(&#retrying, #wait)),
        ),
        Some(await_span) => {
            let awaited = quote_spanned!(await_span=> .await);
            let at = runtime.private_at(await_span);
            (
                if marked {
                    quote!(#private::attempt_async(async { #pin #(#lets)* #block }) #awaited)
                } else {
                    quote!((async { #pin #(#lets)* #block } #awaited, false))
                },
                {
                    let needs_tokio = NeedsTokio::RetryAsync.error_at(await_span);
                    quote_spanned!(await_span=>
                        #at::retry_sleep!(#needs_tokio &#retrying, #wait) #awaited
                    )
                },
            )
        }
    };
    let spec_init = quote! {
        #private::RetrySpec {
            attempts: #attempts,
            exponential: #exponential,
            base_nanos: #base,
            multiplier: #multiplier,
            max_nanos: #max,
            jitter: #jitter,
        }
    };
    // `hedge` (async only, checked): attempts made by a closure, run by the runtime.
    if let (Some(hedge), Some(await_span)) = (&args.hedge, shape.await_span()) {
        let awaited = quote_spanned!(await_span=> .await);
        let at = runtime.private_at(await_span);
        let make = ident("__resilience_make");
        let hedge_spec = ident("__RESILIENCE_HEDGE");
        let log = ident("__RESILIENCE_LATENCIES");
        let hedge_init = match hedge.value {
            Hedge::Fixed(nanos) => {
                let nanos = proc_macro2::Literal::u64_suffixed(nanos);
                quote!(#private::HedgeSpec::Fixed { nanos: #nanos })
            }
            Hedge::Percentile(tenths) => {
                let tenths = proc_macro2::Literal::u32_suffixed(tenths);
                quote!({
                    static #log: #private::LatencyLog = #private::LatencyLog::new();
                    #private::HedgeSpec::Percentile { tenths: #tenths, log: &#log }
                })
            }
        };
        let attempt = if marked {
            quote!(#private::attempt_async(async move { #pin #(#lets)* #block }) #awaited)
        } else {
            quote!((async move { #pin #(#lets)* #block } #awaited, false))
        };
        // At `async`, where the error without the `tokio` feature belongs.
        let needs_tokio = NeedsTokio::Hedge.error_at(await_span);
        let run = quote_spanned!(await_span=>
            #at::retry_hedge!(#needs_tokio #retrying, &#spec, &#hedge_spec, #make) #awaited
        );
        let body = quote! {
            #inner_attrs
            #uses
            let #point = #handle;
            let #budget_var: ::core::option::Option<&'static #private::RetryBudget> = #budget;
            static #spec: #private::RetrySpec = #spec_init;
            static #hedge_spec: #private::HedgeSpec = #hedge_init;
            let #retrying = #private::Retrying::begin(#point, #budget_var);
            let #make = || {
                #(#copies)*
                async move {
                    let (#out, #refused) = #attempt;
                    let #again: bool = !#refused && #decide;
                    (#out, #refused, #again)
                }
            };
            #run
        };
        return super::emit(&item, Some(body));
    }
    let body = quote! {
        #inner_attrs
        #uses
        let #point = #handle;
        let #budget_var: ::core::option::Option<&'static #private::RetryBudget> = #budget;
        static #spec: #private::RetrySpec = #spec_init;
        let mut #retrying = #private::Retrying::begin(#point, #budget_var);
        loop {
            #(#copies)*
            let (#out, #refused) = #attempt;
            let #again: bool = !#refused && #decide;
            if !#again {
                return #out;
            }
            match #private::Retrying::failed(&mut #retrying, &#spec) {
                ::core::option::Option::Some(#wait) => #sleep,
                ::core::option::Option::None => return #out,
            }
        }
    };
    super::emit(&item, Some(body))
}

// Output, at the return type (`Result` in `io::Result<T>`), without `retry_if`:
//     ::core::option::Option::is_some(&RT::Fallible::retry_error(&__resilience_out))
// with `retry_if = pred`, the predicate's call at `pred`:
//     match RT::Fallible::retry_error(&__resilience_out) {
//         Some(__resilience_e) => RT::RetryPredicate::<_, _>::should_retry(__resilience_e, &pred),
//         None => false,
//     }
//
// Whether the output is a `Result` is for rustc to say (an alias such as
// `io::Result<T>` is one; the macro cannot tell): through `Fallible`, whose message
// says what to write, at the return type. The predicate goes through
// `RetryPredicate` for the same reason, at `pred`; the error comes first so that
// rustc knows `E` when it weighs the predicate, and names it in the message.
fn decide(runtime: &Runtime, args: &RetryArgs, sig: &syn::Signature) -> TokenStream {
    let returned = at_user_token(match &sig.output {
        ReturnType::Type(_, ty) => super::type_span(ty),
        // `validate_retry` refused it; any span will do.
        ReturnType::Default => sig.ident.span(),
    });
    // Every token of the call at the return type with the same hygiene, ours: with
    // the argument in another context than the path, rustc would report the call
    // twice, once at the whole attribute.
    let out = proc_macro2::Ident::new("__resilience_out", returned);
    let at = runtime.private_at(returned);
    let error = quote_spanned!(returned=> #at::Fallible::retry_error(&#out));
    match &args.retry_if {
        None => quote_spanned!(returned=> ::core::option::Option::is_some(&#error)),
        Some(predicate) => {
            let path = &predicate.value;
            let span = at_user_token(super::path_span(path));
            let err = proc_macro2::Ident::new("__resilience_e", span);
            let at = runtime.private_at(span);
            let call = quote_spanned!(span=>
                #at::RetryPredicate::<_, _>::should_retry(#err, &#path)
            );
            quote! {
                match #error {
                    ::core::option::Option::Some(#err) => #call,
                    ::core::option::Option::None => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    #[test]
    fn stacked_below_runs_inside_the_loop_and_marks() {
        let out = super::expand(
            quote!(attempts = 2),
            quote!(
                #[downgrade(point = "p", default = Ok(0))]
                fn f(id: String) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(!out.contains("# [downgrade"), "{out}");
        let looped = out.find("loop {").unwrap();
        let entered = out.find("__private :: enter (").unwrap();
        assert!(
            looped < entered,
            "the point is asked inside the loop: {out}"
        );
        assert!(out.contains("__private :: mark_downgraded () ;"), "{out}");
        assert!(out.contains("__private :: attempt (||"), "{out}");
        // The stacked point's name counts the retries.
        assert!(out.contains("StaticPoint :: new (\"p\")"), "{out}");
        assert!(
            out.contains(
                "let id = :: resilience_runtime :: __private :: RetryArgument :: clone_for_attempt (& id) ;"
            ),
            "{out}"
        );
        assert!(out.contains("use downgrade as _ ;"), "{out}");
    }

    #[test]
    fn alone_needs_no_mark() {
        let out = super::expand(
            quote!(),
            quote!(
                fn f(name: &str, out: &mut Vec<u8>) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(out.contains("attempt_unmarked"), "{out}");
        assert!(!out.contains("mark_downgraded"), "{out}");
        assert!(out.contains("let out = & mut * out ;"), "{out}");
        assert!(!out.contains("clone_for_attempt (& name)"), "{out}");
    }

    #[test]
    fn hedge_makes_attempts_with_a_closure_and_only_then() {
        let plain = super::expand(
            quote!(attempts = 2),
            quote!(
                async fn f(id: String) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(plain.contains("loop {"), "{plain}");
        assert!(!plain.contains("hedge"), "{plain}");
        let hedged = super::expand(
            quote!(attempts = 2, hedge = "p95"),
            quote!(
                #[downgrade(point = "p")]
                async fn f(id: String, name: &str) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(!hedged.contains("loop {"), "{hedged}");
        assert!(hedged.contains("let __resilience_make = || {"), "{hedged}");
        assert!(
            hedged.contains(
                "let id = :: resilience_runtime :: __private :: RetryArgument :: clone_for_attempt (& id) ;"
            ),
            "{hedged}"
        );
        assert!(hedged.contains("attempt_async (async move {"), "{hedged}");
        assert!(hedged.contains("tenths : 950u32"), "{hedged}");
        assert!(hedged.contains("retry_hedge ! ("), "{hedged}");
    }

    #[test]
    fn the_output_is_judged_through_fallible_and_the_predicate_through_retry_predicate() {
        let out = super::expand(
            quote!(),
            quote!(
                fn f() -> io::Result<u8> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(
            out.contains(
                "let __resilience_again : bool = ! __resilience_refused && :: core :: option :: \
                 Option :: is_some (& :: resilience_runtime :: __private :: Fallible :: \
                 retry_error (& __resilience_out)) ;"
            ),
            "{out}"
        );
        let out = super::expand(
            quote!(retry_if = Error::is_transient),
            quote!(
                async fn f() -> Result<u8, Error> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(
            out.contains(
                "match :: resilience_runtime :: __private :: Fallible :: retry_error \
                 (& __resilience_out) { :: core :: option :: Option :: Some (__resilience_e) \
                 => :: resilience_runtime :: __private :: RetryPredicate :: < _ , _ > :: \
                 should_retry (__resilience_e , & Error :: is_transient) , :: core :: option \
                 :: Option :: None => false , }"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_return_type_that_cannot_be_a_result_is_refused_at_it() {
        for (item, expected) in [
            (
                quote!(
                    fn f() {}
                ),
                "and `f` returns nothing; return `Result<(), E>`",
            ),
            (
                quote!(
                    fn f() -> () {}
                ),
                "not `()`: only an `Err` is retried; return `Result<(), E>`",
            ),
            (
                quote!(
                    fn f() -> (u8, u8) {
                        (1, 2)
                    }
                ),
                "not a tuple: only an `Err` is retried; return `Result<(..), E>`",
            ),
            (
                quote!(
                    fn f() -> ! {
                        loop {}
                    }
                ),
                "not `!`: a function that never returns",
            ),
            (
                quote!(
                    fn f() -> impl Future<Output = Result<u8, E>> + Send {
                        async { Ok(1) }
                    }
                ),
                "cannot retry the future that a sync fn returns",
            ),
        ] {
            let out = super::expand(quote!(), item.clone()).to_string();
            assert!(out.contains("compile_error"), "{out}");
            assert!(out.contains(expected), "{out}");
            // The item is kept.
            assert!(out.starts_with(&item.to_string()), "{out}");
        }
        // Anything else is rustc's to judge: an alias of `Result` is one.
        let out = super::expand(
            quote!(),
            quote!(
                fn f() -> anyhow::Result<u8> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn an_async_fn_hands_the_missing_feature_error_to_retry_sleep() {
        let out = super::expand(
            quote!(),
            quote!(
                async fn f() -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(
            out.contains(
                "retry_sleep ! ({ :: core :: compile_error ! { \"`#[retry]` on an `async fn` \
                 needs the `tokio` feature"
            ),
            "{out}"
        );
        assert!(
            out.contains("} } & __resilience_retrying , __resilience_wait) . await"),
            "{out}"
        );
    }

    #[test]
    fn below_a_downgrade_runs_inside_the_point() {
        let out = super::super::downgrade::expand(
            quote!(point = "p", default = Ok(0)),
            quote!(
                #[retry(attempts = 2)]
                fn f() -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        let entered = out.find("__private :: enter (").unwrap();
        let looped = out.find("loop {").unwrap();
        assert!(
            entered < looped,
            "one call of the point around the loop: {out}"
        );
        assert!(!out.contains("mark_downgraded"), "{out}");
        assert!(out.contains("use retry as _ ;"), "{out}");
    }
}
