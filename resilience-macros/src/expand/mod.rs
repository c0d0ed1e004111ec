//! Owns the wrapping shared by `#[downgrade]` and `#[breaker]`; the two
//! differ only in the [`Enter`] function that asks the runtime for a permit.
//!
//! The whole pipeline runs from [`run`]: parse the arguments, parse the item,
//! validate, and only then expand. On any error the user's item is emitted
//! unchanged, followed by the errors, so the function never disappears.
//!
//! Every identifier we introduce has `Span::mixed_site()` and a
//! `__resilience_` prefix; every path is absolute (`::core`, `::std`, or the
//! runtime's `__private` module from `paths`).

pub(crate) mod breaker;
pub(crate) mod downgrade;
pub(crate) mod retry;

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned as _;
use syn::{
    ExprPath, FnArg, GenericArgument, LitStr, Pat, PatIdent, PathArguments, ReturnType, Signature,
    Type, TypeInfer,
};

use crate::args::{Args, DefaultValue, Kind};
use crate::errors::{Errors, NeedsTokio};
use crate::item::{Body, ItemFn, SplitBody};
use crate::paths::Runtime;
use crate::shape::Shape;
use crate::validate;

/// Builds the expression that asks the runtime for a permit, from the runtime's
/// `__private` path, the identifier holding the `&'static Point` and where the permit
/// goes: for a sync fn (`Entry::Sync`) the `Option<Permit>` the runtime writes an
/// admitted call's permit into, giving a `Result<(), Downgraded>`; for an async fn
/// (`Entry::Async`) the call's `Pending` guard, giving an `Admission` (ready, or a
/// wait in the point's queue to await).
///
/// With `key = ...`, `key` is the call's `RT::KeyArg` (an identifier for a sync fn,
/// taken by reference; an expression for an async fn, taken by value) and the keyed
/// entry is called.
pub(crate) type Enter = fn(
    private: &TokenStream,
    point: &Ident,
    entry: Entry<'_>,
    key: Option<&TokenStream>,
) -> TokenStream;

/// Where an entry puts the permit (see [`Enter`]).
#[derive(Clone, Copy)]
pub(crate) enum Entry<'a> {
    /// The permit slot of a sync call.
    Sync(&'a TokenStream),
    /// The `Pending` guard of an async call.
    Async(&'a TokenStream),
}

/// The pipeline: parse -> validate -> expand.
pub(crate) fn run(kind: Kind, args: TokenStream, item: TokenStream, enter: Enter) -> TokenStream {
    // A `#[retry]` below runs inside this point: expand it first (see `retry`).
    let item = match retry::absorb_below(item) {
        Ok(item) => item,
        Err(out) => return out,
    };
    match run_marked(kind, args, item, enter, false) {
        Ok(out) | Err(out) => out,
    }
}

/// The pipeline, `Err` (the item kept, and the errors) when it failed; with `mark`, a
/// refused or cut call marks the attempt of the `#[retry]` above as downgraded.
pub(crate) fn run_marked(
    kind: Kind,
    args: TokenStream,
    item: TokenStream,
    enter: Enter,
    mark: bool,
) -> Result<TokenStream, TokenStream> {
    let mut errors = Errors::default();
    let (mut args, args_error) = Args::parse(args);
    args.mark_downgrade = mark;
    if let Some(err) = args_error {
        errors.push(err);
    }
    let parsed = match ItemFn::parse(item.clone(), kind) {
        Ok(parsed) => {
            validate::validate(kind, &args, &parsed, &mut errors);
            Some(parsed)
        }
        Err(err) => {
            errors.push(err);
            None
        }
    };
    match (errors.finish(), parsed) {
        (None, Some(parsed)) => Ok(wrap(kind, &args, parsed, enter)),
        (err, _) => {
            // Keep the item so that callers and IDEs still see the function.
            let err = err.map(|err| err.to_compile_error());
            Err(quote!(#item #err))
        }
    }
}

/// An identifier of ours: hygienic, so user code can neither see nor shadow it.
fn ident(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

// Input:  #[attrs] vis fn get(&self, id: u64) -> Result<Item, E> { #![inner] BODY }
// Output: #[attrs] vis fn get(&self, id: u64) -> Result<Item, E> {
//             #![inner]
//             GUARDED
//         }
// where GUARDED is
//             let __resilience_point = { static __RESILIENCE_POINT: .. = ..; .. };   // point_handle
//             { #[distributed_slice(..)] static __RESILIENCE_DECLARED: .. = ..; }  // declared_point
//             let mut __resilience_permit: Option<RT::Permit> = None;
//             #[allow(unreachable_code, clippy::diverging_sub_expression)]          // for `-> !`
//             let () = match ENTER(__resilience_point, &mut __resilience_permit) {   // acquire_permit
//                 Ok(()) => (),
//                 Err(..) => return FALLBACK | DEFAULT | FromDowngraded,             // on_downgrade
//             };
//             match CAUGHT_BODY {                                                    // caught_body
//                 Ok(__resilience_out) => { finish(point, &mut permit, CLASSIFY); __resilience_out } // record_outcome
//                 Err(__resilience_panic) => { panicked(point, &mut permit); resume_unwind(__resilience_panic) }
//             }
//
// With `timeout = "200ms"` (async only), statements before the `match` run the body
// under the deadline, and a cut call returns what a downgraded one does (see
// `caught_body`).
//
// The permit stays in its variable from entry to completion: moved by value, the
// compiler would copy it through the stack in wide loads that stall on the narrower
// stores that built it.
//
// For an `#[async_trait]` method (see `Shape::Boxed`):
// Input:  fn get<'a>(&'a self) -> Pin<Box<dyn Future<Output = R> + Send + 'a>> {
//             Box::pin(async move { BODY })
//         }
// Output: fn get<'a>(&'a self) -> Pin<Box<dyn Future<Output = R> + Send + 'a>> {
//             Box::pin(async move { GUARDED })      // GUARDED as for `async fn .. -> R`
//         }
fn wrap(kind: Kind, args: &Args, mut item: ItemFn, enter: Enter) -> TokenStream {
    let Some(split) = item.body.split() else {
        // `validate` rejects a missing body; emit the item unchanged rather than panic.
        return emit(&item, None);
    };
    let SplitBody { inner_attrs, .. } = &split;
    let shape = Shape::of(&item.sig, &split);
    let mut block = match &shape {
        Shape::Boxed { future, .. } => future.block.clone(),
        Shape::Sync | Shape::Async { .. } => split.block.clone(),
    };
    // The body's braces become ours (shown where they were): the block is
    // now the tail of a closure body, and with the user's span rustc would
    // suggest removing the "unnecessary braces" of `fn f() -> u8 { 1 }`.
    block.set_span(at_user_token(block.span()));

    let runtime = Runtime::new(args.krate.as_ref().map(|krate| &krate.value));
    let private = runtime.private();
    // Only a fallback needs the arguments, so only then are patterns rebound.
    let rebound = match args.fallback_fn() {
        Some(_) => rebind_patterns(&mut item.sig),
        None => Rebound::default(),
    };

    let point = ident("__resilience_point");
    let slot = Slot::of(&shape);
    let Slot {
        expr: permit,
        end: ended,
        ..
    } = &slot;
    let out = ident("__resilience_out");
    let panic = ident("__resilience_panic");

    let output = match &shape {
        Shape::Boxed { output, .. } => ReturnKind::of_type(output),
        Shape::Sync | Shape::Async { .. } => ReturnKind::of(&item.sig),
    };
    let handle = point_handle(&private, args, &item.sig);
    let declared = declared_point(&private, kind, args, &item.sig);
    let acquire = acquire_permit(&runtime, args, &item.sig, &shape, &rebound, &slot, enter);
    // `validate` allows `timeout` on a body that runs as a future only.
    let timed = args
        .timeout
        .as_ref()
        .filter(|_| shape.await_span().is_some())
        .map(|timeout| Timed {
            nanos: timeout.value.nanos,
            key_span: timeout.key_span,
            on_cut: on_downgrade(&runtime, args, &item.sig, &shape, &rebound),
            // A fallback called after a cut needs the arguments the body had: the
            // body borrows them instead of taking them.
            moves: args.fallback_fn().is_none(),
            marked: marked(&runtime, args),
        });
    let Caught {
        prelude: caught_prelude,
        caught,
    } = caught_body(
        &runtime,
        &shape,
        &output,
        &rebound,
        &block,
        &slot,
        timed.as_ref(),
    );
    let outcome = record_outcome(&private, args, &output, &slot);

    let declare_slot = match shape.await_span() {
        // A sync call cannot be cancelled: its slot is a plain local.
        None => quote!(
            let mut #permit: ::core::option::Option<#private::Permit> = ::core::option::Option::None;
        ),
        // An async call's future can be dropped at any await: the guard records a
        // cancelled call then, with or without a permit.
        Some(_) => {
            let pending = ident("__resilience_pending");
            quote!(let mut #pending = #private::Pending::new(#point);)
        }
    };
    // The call's `tracing` span (the runtime's `tracing` feature) around the entry,
    // the body and the completion; without the feature, `traced!` is its statements.
    let traced = match shape.await_span() {
        None => quote!(sync),
        Some(_) => quote!(async),
    };
    let guarded = quote! {
        let #point = #handle;
        #declared
        #private::traced! { #traced #point;
            // For a fallback or default of type `!` (always so on a `-> !` fn, or
            // `default = unreachable!()`): our `return` of it is then unreachable,
            // and clippy calls it a diverging sub-expression. Neither is the
            // user's concern. On the statement, because clippy reads lint levels
            // there, not on the match arm.
            #declare_slot
            #[allow(unreachable_code, clippy::diverging_sub_expression)]
            let () = #acquire;
            #caught_prelude
            match #caught {
                ::core::result::Result::Ok(#out) => {
                    #outcome
                    #out
                }
                ::core::result::Result::Err(#panic) => {
                    #private::panicked(#point, &mut #permit);
                    #ended
                    ::std::panic::resume_unwind(#panic)
                }
            }
        }
    };
    let body = match &shape {
        Shape::Boxed { future, .. } => {
            let box_pin = &future.box_pin;
            quote!(#inner_attrs #box_pin(async move { #guarded }))
        }
        Shape::Sync | Shape::Async { .. } => quote!(#inner_attrs #guarded),
    };
    emit(&item, Some(body))
}

/// Where an admitted call's permit lives, and what marks the call as ended.
struct Slot {
    /// `__resilience_permit` (sync) or `__resilience_pending.slot` (async).
    expr: TokenStream,
    /// `__resilience_pending` (async only): the guard the async entry takes.
    guard: Option<TokenStream>,
    /// Nothing (sync) or `__resilience_pending.done = true;` (async): after it, dropping
    /// the guard records nothing.
    end: TokenStream,
}

impl Slot {
    // Sync:  let mut __resilience_permit: Option<RT::Permit> = None;
    // Async: let mut __resilience_pending = RT::Pending::new(__resilience_point);
    //        (its Drop records a cancelled call unless `done` was set)
    fn of(shape: &Shape) -> Slot {
        match shape.await_span() {
            None => Slot {
                expr: ident("__resilience_permit").into_token_stream(),
                guard: None,
                end: TokenStream::new(),
            },
            Some(_) => {
                let pending = ident("__resilience_pending");
                Slot {
                    expr: quote!(#pending.slot),
                    guard: Some(pending.to_token_stream()),
                    end: quote!(#pending.done = true;),
                }
            }
        }
    }
}

/// Puts attributes, visibility and signature back exactly as parsed, with a
/// new body (or the original one if `body` is `None`).
fn emit(item: &ItemFn, body: Option<TokenStream>) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        defaultness,
        sig,
        body: original,
    } = item;
    let body = match (body, original) {
        // Load-bearing span: the new body's braces are the user's braces.
        // rustc derives the item's span from its first and last tokens, and
        // an item ending in one of our tokens counts as macro-generated:
        // `dead_code` would then stay silent about an unused function.
        (Some(body), Body::Block(group)) => {
            let mut braces = Group::new(Delimiter::Brace, body);
            braces.set_span(group.span());
            braces.into_token_stream()
        }
        (Some(body), Body::Missing(_)) => quote!({ #body }),
        (None, Body::Block(group)) => group.to_token_stream(),
        (None, Body::Missing(semi)) => semi.to_token_stream(),
    };
    quote! {
        #(#attrs)*
        #vis #defaultness #sig #body
    }
}

/// What the fallback is called with, and how to restore the user's patterns.
#[derive(Default)]
struct Rebound {
    /// One expression per parameter, receiver first: `self`, `id`, `__resilience_arg1`.
    values: Vec<TokenStream>,
    /// `let PATTERN = __resilience_argN;` for each rebound parameter.
    lets: Vec<TokenStream>,
}

// Input:  fn f(&self, id: u64, (a, b): (i32, i32), _: u8)
// Output: fn f(&self, id: u64, __resilience_arg2: (i32, i32), __resilience_arg3: u8)
//         values: [self, id, __resilience_arg2, __resilience_arg3]
//         lets:   [let (a, b) = __resilience_arg2;  let _ = __resilience_arg3;]
//
// A pattern cannot be passed to the fallback, so a parameter that is not a
// plain (possibly `mut`) identifier gets a hygienic name in the signature
// and is destructured again at the start of the body. Plain identifiers,
// including `mut x`, are passed by their own token and left alone; `ref x`
// and `x @ ..` count as patterns.
fn rebind_patterns(sig: &mut Signature) -> Rebound {
    let mut rebound = Rebound::default();
    for (index, input) in sig.inputs.iter_mut().enumerate() {
        match input {
            FnArg::Receiver(receiver) => {
                // The user's own `self` token, which resolves to the receiver;
                // a `self` of ours would not (`self` is hygienic in macros).
                rebound.values.push(receiver.self_token.to_token_stream());
            }
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    ..
                }) => rebound.values.push(ident.to_token_stream()),
                _ => {
                    // Located at the pattern it replaces, where errors about
                    // this argument (say, in the fallback call) belong.
                    let span = at_user_token(typed.pat.span());
                    let fresh = format_ident!("__resilience_arg{}", index, span = span);
                    let pattern = std::mem::replace(
                        &mut *typed.pat,
                        Pat::Ident(PatIdent {
                            attrs: Vec::new(),
                            by_ref: None,
                            mutability: None,
                            ident: fresh.clone(),
                            subpat: None,
                        }),
                    );
                    rebound.lets.push(quote!(let #pattern = #fresh;));
                    rebound.values.push(fresh.into_token_stream());
                }
            },
        }
    }
    rebound
}

// Input:  fn get(..), point = "orders::get" (or none)
// Output: {
//             static __RESILIENCE_POINT: RT::StaticPoint = RT::StaticPoint::new("orders::get");
//             RT::StaticPoint::get(&__RESILIENCE_POINT)
//         }
//
// The default name is `concat!(module_path!(), "::", "get")`. The static is
// local to a block in the fn, so nothing the user declares can collide with
// it and the name stays data (a string literal), never an identifier.
fn point_handle(private: &TokenStream, args: &Args, sig: &Signature) -> TokenStream {
    let name = match &args.point {
        Some(point) => point.value.to_token_stream(),
        None => {
            let fn_name = LitStr::new(&sig.ident.unraw().to_string(), sig.ident.span());
            quote!(::core::concat!(::core::module_path!(), "::", #fn_name))
        }
    };
    let cell = ident("__RESILIENCE_POINT");
    quote!({
        static #cell: #private::StaticPoint = #private::StaticPoint::new(#name);
        #private::StaticPoint::get(&#cell)
    })
}

// Input:  #[downgrade(point = "orders::get", default)] fn get(..)
// Output: {
//             #[RT::linkme::distributed_slice(RT::DECLARED_POINTS)]
//             #[linkme(crate = RT::linkme)]
//             static __RESILIENCE_DECLARED: RT::DeclaredPoint = RT::DeclaredPoint::downgrade(
//                 "orders::get",                                        // or the default name
//                 ::core::concat!(::core::module_path!(), "::", "get"),
//                 ::core::file!(), ::core::line!(),                     // at the fn's name
//                 true,                                                 // fallback or default
//             );
//         }
//
// One link-time registration per annotated fn, so the runtime can list every
// point before any call (`Registry::declared_points`). The static lives in a
// block of its own inside the body: items nested in a fn never capture its
// generics, so generic fns and methods work, and a block keeps a second
// attribute's static (stacked `#[downgrade]` + `#[breaker]`) from colliding.
// `file!()` and `line!()` are spanned at the fn's name so they report the
// user's source, not the attribute's expansion.
fn declared_point(private: &TokenStream, kind: Kind, args: &Args, sig: &Signature) -> TokenStream {
    let fn_name = LitStr::new(&sig.ident.unraw().to_string(), sig.ident.span());
    let name = match &args.point {
        Some(point) => point.value.to_token_stream(),
        None => quote!(::core::concat!(::core::module_path!(), "::", #fn_name)),
    };
    let constructor = match kind {
        Kind::Downgrade => quote!(downgrade),
        Kind::Breaker | Kind::Retry => quote!(breaker),
    };
    let has_fallback = args.fallback_fn().is_some() || args.default.is_some();
    // The user's own span, not `at_user_token`: `line!()` walks up to the
    // outermost macro call of its span's context, which for one of our
    // spans would be the attribute rather than the fn's name.
    let site = sig.ident.span();
    let file = quote_spanned!(site=> ::core::file!());
    let line = quote_spanned!(site=> ::core::line!());
    let cell = ident("__RESILIENCE_DECLARED");
    quote!({
        #[#private::linkme::distributed_slice(#private::DECLARED_POINTS)]
        #[linkme(crate = #private::linkme)]
        static #cell: #private::DeclaredPoint = #private::DeclaredPoint::#constructor(
            #name,
            ::core::concat!(::core::module_path!(), "::", #fn_name),
            #file,
            #line,
            #has_fallback,
        );
    })
}

// Input:  ENTER(__resilience_point, __resilience_permit), e.g.
//         `RT::enter(__resilience_point, &mut __resilience_permit)`
// Output: match ENTER(__resilience_point, __resilience_permit) {
//             Ok(()) => (),
//             Err(BINDING) => return VALUE,                                     // on_downgrade
//         }
// With `key = EXPR`, the entry is a block that ends before the body runs:
//     sync:  { let __resilience_key = &(EXPR);
//              let __resilience_key_arg = RT::KeyArg::new(&__resilience_key);
//              RT::enter_keyed(__resilience_point, &mut __resilience_permit, &__resilience_key_arg) }
//     async: { let __resilience_key = &(EXPR);
//              let __resilience_entered = match RT::enter_async_keyed(&mut __resilience_pending,
//                      RT::KeyArg::new(&__resilience_key)) { Ready(r) => r, Wait(w) => w.await };
//              __resilience_entered }
fn acquire_permit(
    runtime: &Runtime,
    args: &Args,
    sig: &Signature,
    shape: &Shape,
    rebound: &Rebound,
    slot: &Slot,
    enter: Enter,
) -> TokenStream {
    let private = runtime.private();
    let point = ident("__resilience_point");
    // `priority = expr`: the tier is set for the entry only (a wait in the queue
    // keeps it), never across the body's awaits.
    let prioritised = |entry: TokenStream| match &args.priority {
        None => entry,
        Some(priority) => {
            let expr = &priority.value;
            let span = at_user_token(expr.span());
            let at = runtime.private_at(span);
            let scope = quote_spanned!(span=> #at::PriorityScope::enter(#expr));
            quote!({
                let __resilience_priority = #scope;
                #entry
            })
        }
    };
    // `key = expr`: evaluated once, borrowed (`&(expr)`, a temporary it makes lives as
    // long), in a block of the entry that ends before the body runs, so the body may
    // still move what the key borrowed.
    let key = args.key.as_ref().map(|key| {
        let expr = &key.value;
        let span = at_user_token(expr.span());
        let borrowed = ident("__resilience_key");
        let at = runtime.private_at(span);
        // Every token of the call at the expression (the binding's hygiene kept): a key
        // that is not a `HotKey` is reported there, not at the whole attribute.
        let borrowed_at = Ident::new("__resilience_key", span);
        Keyed {
            evaluated: quote_spanned!(span=> let #borrowed = &(#expr);),
            arg: quote_spanned!(span=> #at::KeyArg::new(&#borrowed_at)),
        }
    });
    let entered = match (&slot.guard, shape.await_span()) {
        (Some(guard), Some(await_span)) => {
            let keyed = key.as_ref().map(|k| &k.arg);
            let admission = prioritised(enter(&private, &point, Entry::Async(guard), keyed));
            let awaited = quote_spanned!(await_span=> .await);
            let wait = ident("__resilience_wait");
            let result = ident("__resilience_entered");
            let evaluated = key.as_ref().map(|k| &k.evaluated);
            // Bound first: the admission borrows the guard, which the refusal below
            // marks done. The key, borrowed by a wait, lives as long as the block.
            quote!({
                #evaluated
                let #result: ::core::result::Result<(), #private::Downgraded> = match #admission {
                    #private::Admission::Ready(#result) => #result,
                    #private::Admission::Wait(#wait) => #wait #awaited,
                };
                #result
            })
        }
        _ => match &key {
            None => prioritised(enter(&private, &point, Entry::Sync(&slot.expr), None)),
            Some(Keyed { evaluated, arg }) => {
                let key_arg = ident("__resilience_key_arg").into_token_stream();
                let entry = enter(&private, &point, Entry::Sync(&slot.expr), Some(&key_arg));
                let entry = prioritised(entry);
                quote!({
                    #evaluated
                    let #key_arg = #arg;
                    #entry
                })
            }
        },
    };
    let OnDowngrade { binding, value } = on_downgrade(runtime, args, sig, shape, rebound);
    let marked = marked(runtime, args);
    let ended = &slot.end;
    let ended = &quote!(#marked #ended);
    let refused = match ended.is_empty() {
        true => quote!(return #value),
        false => quote!({ #ended return #value }),
    };
    let refusal = ident("__resilience_refusal");
    quote! {
        match #entered {
            ::core::result::Result::Ok(()) => (),
            ::core::result::Result::Err(#refusal) => {
                #private::refused(&#refusal);
                let #binding = #refusal;
                #refused
            }
        }
    }
}

/// `key = expr`: the statement that evaluates it, and the call's `RT::KeyArg`.
struct Keyed {
    /// `let __resilience_key = &(expr);`
    evaluated: TokenStream,
    /// `RT::KeyArg::new(&__resilience_key)`
    arg: TokenStream,
}

/// What a downgraded (or, with `timeout`, cut) call returns: the pattern binding
/// the `Downgraded` and the value returned.
struct OnDowngrade {
    binding: TokenStream,
    value: TokenStream,
}

// Output, by argument (BINDING => VALUE):
//     fallback:              _ => Self::fb(self, id)
//     fallback_with_reason:  __resilience_downgraded => Self::fb(self, id, __resilience_downgraded)
//     bare default:          _ => ::core::default::Default::default()
//     default = expr:        _ => expr
//     neither:               __resilience_downgraded =>
//                                RT::FromDowngraded::from_downgraded(__resilience_downgraded)
// (a fallback of an async fn is awaited: `Self::fb(self, id).await`)
fn on_downgrade(
    runtime: &Runtime,
    args: &Args,
    sig: &Signature,
    shape: &Shape,
    rebound: &Rebound,
) -> OnDowngrade {
    let downgraded = ident("__resilience_downgraded");
    let (binding, value) = if let Some((path, with_reason)) = args.fallback_fn() {
        let reason = with_reason.then_some(&downgraded);
        let binding = match reason {
            Some(d) => d.to_token_stream(),
            None => quote!(_),
        };
        (
            binding,
            fallback_call(runtime, sig, path, shape, rebound, reason),
        )
    } else if let Some(default) = &args.default {
        let value = match &default.value {
            DefaultValue::Expr(expr) => expr.to_token_stream(),
            // Spanned at the `default` key: "`Default` is not implemented
            // for `X`" then points into the attribute.
            DefaultValue::Trait => {
                quote_spanned!(default.key_span=> ::core::default::Default::default())
            }
        };
        (quote!(_), value)
    } else {
        // Spanned at the return type (the fn name if there is none): the
        // trait's `on_unimplemented` message then points at the signature
        // the user has to change.
        let span = match (shape, &sig.output) {
            (Shape::Boxed { output, .. }, _) => type_span(output),
            (_, ReturnType::Type(_, ty)) => type_span(ty),
            (_, ReturnType::Default) => sig.ident.span(),
        };
        let private = runtime.private_at(span);
        let value = quote_spanned!(span=> #private::FromDowngraded::from_downgraded(#downgraded));
        (downgraded.to_token_stream(), value)
    };
    OnDowngrade { binding, value }
}

// Input:  fallback = Self::fb on `async fn get(&self, id: u64)`
// Output: Self::fb(self, id).await        (no `.await` on a sync fn; an
//                                          `#[async_trait]` fallback's boxed
//                                          future is awaited the same way)
//         Self::fb(self, id, __resilience_downgraded).await   (fallback_with_reason)
//
// The tokens we add are located at the path's last segment, so a fallback
// with the wrong arguments or return type is reported at `fb` in the
// attribute. See `at_user_token` for why they are not plain user spans.
fn fallback_call(
    runtime: &Runtime,
    sig: &Signature,
    path: &ExprPath,
    shape: &Shape,
    rebound: &Rebound,
    reason: Option<&Ident>,
) -> TokenStream {
    let span = at_user_token(path_span(path));
    let values = &rebound.values;
    let awaited = shape.await_span().map(|_| quote_spanned!(span=> .await));
    // The same hygiene as the binding, located at the path: a fallback whose last
    // parameter is not a `Downgraded` is reported at `fb`.
    let downgraded = reason.map(|d| Ident::new(&d.to_string(), span));
    let call_args = match &downgraded {
        None => quote_spanned!(span=> #(#values),*),
        Some(d) => quote_spanned!(span=> #(#values,)* #d),
    };
    match fallback_pointer(runtime, sig, shape, reason.is_some(), span) {
        // The fallback is first made the pointer the function's parameters call
        // for: a fallback with other parameters is refused there, at `fb`, as
        // "expected fn pointer `fn(u64) -> _`, found fn item `fn(u32) -> ..`",
        // instead of at each argument with a suggestion to rewrite the user's
        // own parameters.
        Some(pointer) => {
            let f = Ident::new("__resilience_fallback", span);
            quote_spanned! {span=> {
                let #f: #pointer = #path;
                #f(#call_args) #awaited
            }}
        }
        // Called directly: each argument is located at `fb` (resolving as the
        // parameter it names), so a mismatch is reported there, at the fallback,
        // not at the function's own parameter with a suggestion to rewrite it.
        None => {
            let call_args = located_at(call_args, span);
            quote_spanned!(span=> #path(#call_args) #awaited)
        }
    }
}

/// `tokens` shown at `span`, each still resolving names where it was written.
fn located_at(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            match &mut tree {
                proc_macro2::TokenTree::Group(g) => {
                    let mut inner = Group::new(g.delimiter(), located_at(g.stream(), span));
                    inner.set_span(span.resolved_at(g.span()));
                    *g = inner;
                }
                other => other.set_span(span.resolved_at(other.span())),
            }
            tree
        })
        .collect()
}

// Input:  fn get(&self, id: u64, name: &str) -> Option<String>, fallback_with_reason
// Output: fn(&Self, u64, &str, RT::Downgraded) -> _
//
// The type a fallback is coerced to before it is called: the function's
// parameter types (the receiver's type first) and an inferred return type (a
// fallback returning `!` still fits any function, an async one returns its
// future; a wrong return type is reported at the call, at `fb`, as before).
// `None` where such a pointer cannot be written or could refuse a fallback that
// fits: a parameter of type `impl Trait`; a return type holding a lifetime or a
// reference (a fallback's output may then borrow from an input, which
// `fn(&T) -> _` cannot express); for an async or boxed shape, any parameter
// holding one (the fallback's future captures its inputs' lifetimes).
fn fallback_pointer(
    runtime: &Runtime,
    sig: &Signature,
    shape: &Shape,
    with_reason: bool,
    span: Span,
) -> Option<TokenStream> {
    if sig.variadic.is_some() {
        return None;
    }
    let future = !matches!(shape, Shape::Sync);
    if let ReturnType::Type(_, ty) = &sig.output {
        if borrows_or_hides(ty) {
            return None;
        }
    }
    let mut types = Vec::new();
    for input in &sig.inputs {
        let ty = match input {
            FnArg::Receiver(receiver) => &*receiver.ty,
            FnArg::Typed(typed) => &*typed.ty,
        };
        if has_impl_trait(ty) || (future && borrows_or_hides(ty)) {
            return None;
        }
        types.push(ty.to_token_stream());
    }
    if with_reason {
        let private = runtime.private_at(span);
        types.push(quote_spanned!(span=> #private::Downgraded));
    }
    Some(quote_spanned!(span=> fn(#(#types),*) -> _))
}

/// Whether a type names a lifetime, a reference or an `impl Trait` anywhere.
fn borrows_or_hides(ty: &Type) -> bool {
    let tokens = ty.to_token_stream();
    tokens_have(tokens, &|t| match t {
        proc_macro2::TokenTree::Punct(p) => p.as_char() == '&' || p.as_char() == '\'',
        proc_macro2::TokenTree::Ident(i) => i == "impl" || i == "dyn",
        _ => false,
    })
}

/// Whether a type has an `impl Trait` anywhere.
fn has_impl_trait(ty: &Type) -> bool {
    tokens_have(
        ty.to_token_stream(),
        &|t| matches!(t, proc_macro2::TokenTree::Ident(i) if i == "impl"),
    )
}

fn tokens_have(tokens: TokenStream, found: &dyn Fn(&proc_macro2::TokenTree) -> bool) -> bool {
    tokens.into_iter().any(|t| match &t {
        proc_macro2::TokenTree::Group(g) => tokens_have(g.stream(), found),
        other => found(other),
    })
}

/// The deadline of a `timeout = "..."` call.
struct Timed {
    nanos: u64,
    /// Where the `timeout` key is: the missing-feature error points there.
    key_span: Span,
    /// What a cut call returns (the same as a downgraded one).
    on_cut: OnDowngrade,
    /// Whether the body's future takes the arguments (`async move`); with a
    /// fallback it borrows them, since the fallback is called after a cut.
    moves: bool,
    /// Marks the attempt of a `#[retry]` above as downgraded (or nothing).
    marked: TokenStream,
}

/// `RT::mark_downgraded();` under a `#[retry]`, which then does not retry the call.
fn marked(runtime: &Runtime, args: &Args) -> TokenStream {
    if args.mark_downgrade {
        let private = runtime.private();
        quote!(#private::mark_downgraded();)
    } else {
        TokenStream::new()
    }
}

// Sync:  ::std::panic::catch_unwind(::core::panic::AssertUnwindSafe(move || { PIN LETS { BODY } }))
// Async: RT::CatchUnwind::new(async move { PIN LETS { BODY } }).await
// Async with `timeout = "200ms"`, two statements (the prelude), then the expression
// `__resilience_caught`:
//        let __resilience_body = RT::CatchUnwind::new(async move { PIN LETS { BODY } });
//        #[allow(unreachable_code, clippy::diverging_sub_expression)]
//        let __resilience_caught = match RT::deadline!({ NEEDS_TOKIO } __resilience_point,
//                &mut __resilience_permit, ::core::time::Duration::from_nanos(200000000u64),
//                __resilience_body).await {
//            Ok(__resilience_caught) => __resilience_caught,
//            Err(BINDING) => return VALUE,                      // on_downgrade's
//        };
//        (`async` without `move` when a fallback takes the arguments after a cut;
//        `deadline!` is `run_with_deadline(..)`, or without the runtime's `tokio`
//        feature NEEDS_TOKIO, our `compile_error!` at the `timeout` key: see
//        `NeedsTokio`). The body is a statement of its own so that the `allow` (for a
//        diverging fallback's `return`) does not reach the user's code.
//
// Both evaluate to `Result<Output, Box<dyn Any + Send>>`. The body keeps its
// own braces, so a `use` or `let` in it cannot shadow anything of ours, and
// its `return` and `?` end the closure / async block, not the outer fn.
// `-> !` is special: sync gets `move || -> ! { .. }`; async gets
// `__resilience_never(async move { .. }, None::<fn() -> !>)`, an identity
// fn that fixes the block's output to `!` (which cannot be named as a type
// argument on stable, but can be inferred).
fn caught_body(
    runtime: &Runtime,
    shape: &Shape,
    output: &ReturnKind,
    rebound: &Rebound,
    block: &Group,
    slot: &Slot,
    timed: Option<&Timed>,
) -> Caught {
    let private = &runtime.private();
    let lets = &rebound.lets;
    let pin = output.pin();
    let inner = quote!(#pin #(#lets)* #block);

    match shape.await_span() {
        None => {
            let annotation = match output {
                ReturnKind::Never => Some(quote!(-> !)),
                _ => None,
            };
            Caught::of(quote! {
                ::std::panic::catch_unwind(::core::panic::AssertUnwindSafe(move || #annotation { #inner }))
            })
        }
        Some(await_span) => {
            let capture = match timed {
                Some(Timed { moves: false, .. }) => None,
                _ => Some(quote!(move)),
            };
            let future = match output {
                ReturnKind::Never => {
                    let never = ident("__resilience_never");
                    quote!({
                        fn #never<F, R>(
                            future: F,
                            _: ::core::option::Option<fn() -> R>,
                        ) -> F
                        where
                            F: ::core::future::Future<Output = R>,
                        {
                            future
                        }
                        #never(async #capture { #inner }, ::core::option::Option::None::<fn() -> !>)
                    })
                }
                _ => quote!(async #capture { #inner }),
            };
            // `.await` at the user's `async`, where an await error belongs.
            let awaited = quote_spanned!(await_span=> .await);
            let caught = quote!(#private::CatchUnwind::new(#future));
            let Some(timed) = timed else {
                return Caught::of(quote!(#caught #awaited));
            };
            let body = ident("__resilience_body");
            let point = ident("__resilience_point");
            let permit = &slot.expr;
            let ended = &slot.end;
            let nanos = proc_macro2::Literal::u64_suffixed(timed.nanos);
            // The whole invocation at the `timeout` key (its path, `!` and parentheses),
            // so that the missing-feature error points there.
            let deadline = {
                let private = runtime.private_at(timed.key_span);
                let needs_tokio = NeedsTokio::Timeout.error_at(timed.key_span);
                let mut call = Group::new(
                    Delimiter::Parenthesis,
                    quote!(
                        #needs_tokio
                        #point,
                        &mut #permit,
                        ::core::time::Duration::from_nanos(#nanos),
                        #body
                    ),
                );
                call.set_span(timed.key_span);
                quote_spanned!(timed.key_span=> #private::deadline! #call)
            };
            let OnDowngrade { binding, value } = &timed.on_cut;
            let marked = &timed.marked;
            let result = ident("__resilience_caught");
            Caught {
                prelude: quote! {
                    let #body = #caught;
                    #[allow(unreachable_code, clippy::diverging_sub_expression)]
                    let #result = match #deadline #awaited {
                        ::core::result::Result::Ok(#result) => #result,
                        ::core::result::Result::Err(#binding) => { #marked #ended return #value }
                    };
                },
                caught: result.into_token_stream(),
            }
        }
    }
}

/// The caught body: statements to run first (empty but for a deadline), then the
/// expression of type `Result<Output, Box<dyn Any + Send>>`.
struct Caught {
    prelude: TokenStream,
    caught: TokenStream,
}

impl Caught {
    fn of(caught: TokenStream) -> Caught {
        Caught {
            prelude: TokenStream::new(),
            caught,
        }
    }
}

// Input:  __resilience_out: the value the body produced
// Output: let __resilience_is_exception: bool = CLASSIFY;
//         RT::finish(__resilience_point, &mut __resilience_permit, __resilience_is_exception);
//
// CLASSIFY, without `is_exception`, uses autoref specialization so that it
// compiles for any return type (only `Err` of a `Result` is an exception):
//     { use RT::{ClassifyResult as _, ClassifyOther as _};
//       (&RT::Classify(&__resilience_out)).__resilience_is_err() }
// With `is_exception = pred` (spanned at `pred`, so a non-`Result` return or
// a predicate of the wrong type is reported there):
//     match &__resilience_out { Ok(_) => false, Err(__resilience_e) => pred(__resilience_e) }
// `-> !`: nothing; the body cannot finish normally.
fn record_outcome(
    private: &TokenStream,
    args: &Args,
    output: &ReturnKind,
    slot: &Slot,
) -> TokenStream {
    if let ReturnKind::Never = output {
        return TokenStream::new();
    }
    let out = ident("__resilience_out");
    let point = ident("__resilience_point");
    let permit = &slot.expr;
    let ended = &slot.end;
    let is_exception = ident("__resilience_is_exception");
    let classify = match &args.is_exception {
        Some(predicate) => {
            let path = &predicate.value;
            let span = at_user_token(path_span(path));
            // The argument is located at the predicate too, so a predicate
            // taking the wrong type is reported there, not at the attribute.
            let err = Ident::new("__resilience_e", span);
            quote_spanned! {span=>
                match &#out {
                    ::core::result::Result::Ok(_) => false,
                    ::core::result::Result::Err(#err) => #path(#err),
                }
            }
        }
        None => quote!({
            use #private::{ClassifyOther as _, ClassifyResult as _};
            (&#private::Classify(&#out)).__resilience_is_err()
        }),
    };
    quote! {
        let #is_exception: bool = #classify;
        #private::finish(#point, &mut #permit, #is_exception);
        #ended
    }
}

/// The declared return type, as far as the body wrapper cares.
enum ReturnKind {
    /// `-> !`.
    Never,
    /// A type the closure / async block can be pinned to: `()` when there is
    /// no `-> ..`, otherwise the declared type with `impl Trait` replaced by `_`.
    Pinned(Box<Type>),
    /// Nothing left to pin (`-> impl Trait`): the body decides.
    Inferred,
}

impl ReturnKind {
    fn of(sig: &Signature) -> Self {
        match &sig.output {
            ReturnType::Default => ReturnKind::Pinned(Box::new(syn::parse_quote!(()))),
            ReturnType::Type(_, ty) => ReturnKind::of_type(ty),
        }
    }

    fn of_type(ty: &Type) -> Self {
        if let Type::Never(_) = ty {
            return ReturnKind::Never;
        }
        let mut pinned = ty.clone();
        infer_impl_trait(&mut pinned);
        // `impl` nested somewhere `infer_impl_trait` does not look would make
        // the pin itself an error; pin nothing rather than break the build.
        let still_impl = pinned
            .to_token_stream()
            .into_iter()
            .any(|tt| matches!(&tt, proc_macro2::TokenTree::Ident(i) if i == "impl"));
        if matches!(pinned, Type::Infer(_)) || still_impl {
            ReturnKind::Inferred
        } else {
            ReturnKind::Pinned(Box::new(pinned))
        }
    }

    // Input:  -> Result<impl Display, E>
    // Output: if let Some(__resilience_ret) = None::<Result<_, E>> {
    //             #[allow(unreachable_code)] return __resilience_ret;
    //         }
    //
    // A dead return edge that fixes the output type of the closure or async
    // block before the body is checked, so `?` and `.into()` in the body
    // infer exactly as they did in the fn, and type errors point at the
    // user's tokens. Located at the declared return type; hygienic, so
    // lints still see it as macro-generated. This is the trick async-trait uses.
    fn pin(&self) -> TokenStream {
        let ReturnKind::Pinned(ty) = self else {
            return TokenStream::new();
        };
        let span = at_user_token(ty.span());
        // At the return type too, so "return type inferred to be `T` here"
        // points at the signature rather than at the attribute.
        let ret = Ident::new("__resilience_ret", span);
        quote_spanned! {span=>
            if let ::core::option::Option::Some(#ret) = ::core::option::Option::None::<#ty> {
                #[allow(unreachable_code)]
                return #ret;
            }
        }
    }
}

/// Replaces every `impl Trait` in a type with `_`, so the type can be
/// written in expression position.
fn infer_impl_trait(ty: &mut Type) {
    match ty {
        Type::ImplTrait(impl_trait) => {
            *ty = Type::Infer(TypeInfer {
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        }
        Type::Path(path) => {
            if let Some(qself) = &mut path.qself {
                infer_impl_trait(&mut qself.ty);
            }
            for segment in &mut path.path.segments {
                if let PathArguments::AngleBracketed(generics) = &mut segment.arguments {
                    for arg in &mut generics.args {
                        match arg {
                            GenericArgument::Type(ty) => infer_impl_trait(ty),
                            GenericArgument::AssocType(assoc) => infer_impl_trait(&mut assoc.ty),
                            _ => {}
                        }
                    }
                }
            }
        }
        Type::Reference(reference) => infer_impl_trait(&mut reference.elem),
        Type::Ptr(ptr) => infer_impl_trait(&mut ptr.elem),
        Type::Slice(slice) => infer_impl_trait(&mut slice.elem),
        Type::Array(array) => infer_impl_trait(&mut array.elem),
        Type::Paren(paren) => infer_impl_trait(&mut paren.elem),
        Type::Group(group) => infer_impl_trait(&mut group.elem),
        Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(infer_impl_trait),
        _ => {}
    }
}

/// A span for tokens we generate that is shown at the user's token `span`.
///
/// Errors are then reported where the user can fix them (`fallback = fb`),
/// while the tokens keep our hygiene and still count as macro-generated, so
/// lints do not fire on code the user never wrote (clippy's
/// `ignored_unit_patterns` on our `Ok(_)`, `diverging_sub_expression` on our
/// `return fb(..)`). The user's own tokens keep their spans.
fn at_user_token(span: Span) -> Span {
    Span::mixed_site().located_at(span)
}

/// Where errors about a user path belong: its last segment, the function's
/// name (`fb` in `Self::fb`). A whole-path span would need `Span::join`,
/// which is not stable.
fn path_span(path: &ExprPath) -> Span {
    path.path
        .segments
        .last()
        .map_or_else(|| path.span(), |segment| segment.ident.span())
}

/// Where errors about the return type belong: the type's name (`Result` in
/// `io::Result<T>`), or its first token.
fn type_span(ty: &Type) -> Span {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| ty.span(), |segment| segment.ident.span()),
        _ => ty.span(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        run(Kind::Downgrade, args, item, downgrade::enter).to_string()
    }

    // syn prints a where clause with a trailing comma; nothing else changes.
    #[test]
    fn signature_is_kept() {
        let out = expand(
            quote!(),
            quote!(
                #[inline]
                pub fn get<T: Clone>(&self, id: T) -> Result<T, E>
                where
                    T: Send,
                {
                    Ok(id)
                }
            ),
        );
        assert!(
            out.starts_with("# [inline] pub fn get < T : Clone > (& self , id : T) -> Result < T , E > where T : Send , {"),
            "{out}"
        );
    }

    #[test]
    fn patterns_are_rebound_only_with_a_fallback() {
        let item = quote!(
            fn f((a, b): (i32, i32), _: u8, mut c: u8) -> u8 {
                c += 1;
                a as u8 + c
            }
        );
        let out = expand(quote!(), item.clone());
        assert!(
            out.contains("fn f ((a , b) : (i32 , i32) , _ : u8 , mut c : u8)"),
            "{out}"
        );
        let out = expand(quote!(fallback = fb), item);
        assert!(
            out.contains(
                "fn f (__resilience_arg0 : (i32 , i32) , __resilience_arg1 : u8 , mut c : u8)"
            ),
            "{out}"
        );
        assert!(out.contains("let (a , b) = __resilience_arg0 ;"), "{out}");
        assert!(out.contains("let _ = __resilience_arg1 ;"), "{out}");
        assert!(
            out.contains(
                "return { let __resilience_fallback : fn ((i32 , i32) , u8 , u8) -> _ = fb ; \
                 __resilience_fallback (__resilience_arg0 , __resilience_arg1 , c) }"
            ),
            "{out}"
        );
    }

    #[test]
    fn receiver_is_passed_first() {
        let out = expand(
            quote!(fallback = Self::fb),
            quote!(
                fn f(&self, id: u64) -> u8 {
                    1
                }
            ),
        );
        assert!(
            out.contains(
                "return { let __resilience_fallback : fn (& Self , u64) -> _ = Self :: fb ; \
                 __resilience_fallback (self , id) }"
            ),
            "{out}"
        );
    }

    #[test]
    fn async_fallback_is_awaited() {
        let out = expand(
            quote!(fallback = fb),
            quote!(
                async fn f(id: u64) -> u8 {
                    1
                }
            ),
        );
        assert!(
            out.contains(
                "return { let __resilience_fallback : fn (u64) -> _ = fb ; \
                 __resilience_fallback (id) . await }"
            ),
            "{out}"
        );
        assert!(out.contains("CatchUnwind :: new (async move"), "{out}");
    }

    #[test]
    fn fallback_with_reason_gets_the_downgrade_last() {
        let out = expand(
            quote!(fallback_with_reason = Self::fb),
            quote!(
                fn f(&self, (a, b): (u8, u8)) -> u8 {
                    a + b
                }
            ),
        );
        assert!(
            out.contains(
                "let __resilience_downgraded = __resilience_refusal ; \
                 return { let __resilience_fallback : \
                 fn (& Self , (u8 , u8) , :: resilience_runtime :: __private :: Downgraded) -> _ \
                 = Self :: fb ; __resilience_fallback (self , __resilience_arg1 , \
                 __resilience_downgraded) }"
            ),
            "{out}"
        );
        assert!(out.contains("let (a , b) = __resilience_arg1 ;"), "{out}");
        assert!(!out.contains("deadline"), "{out}");
    }

    #[test]
    fn timeout_runs_the_body_under_the_deadline() {
        let out = expand(
            quote!(timeout = "200ms", default),
            quote!(
                async fn f(id: String) -> u8 {
                    1
                }
            ),
        );
        assert!(
            out.contains(
                "let __resilience_body = :: resilience_runtime :: __private :: CatchUnwind :: new (async move {"
            ),
            "{out}"
        );
        // The error without the `tokio` feature is the macro's, handed to `deadline!`
        // first; the runtime's macro expands it only without the feature.
        assert!(
            out.contains(
                ":: resilience_runtime :: __private :: deadline ! ({ :: core :: compile_error ! { \"`timeout = \\\"...\\\"` needs the `tokio` feature"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "} } __resilience_point , & mut __resilience_pending . slot , :: core :: time :: Duration :: from_nanos (200000000u64) , __resilience_body) . await"
            ),
            "{out}"
        );
        assert!(
            out.contains("Ok (__resilience_caught) => __resilience_caught , :: core :: result :: Result :: Err (_) => { __resilience_pending . done = true ; return :: core :: default :: Default :: default () }"),
            "{out}"
        );
        // The slot is held by the guard that records a cancelled call.
        assert!(
            out.contains("let mut __resilience_pending = :: resilience_runtime :: __private :: Pending :: new (__resilience_point) ;"),
            "{out}"
        );
        // With a fallback the body borrows the arguments, which the fallback takes
        // after a cut.
        let out = expand(
            quote!(timeout = "1s", fallback_with_reason = fb),
            quote!(
                async fn f(id: String) -> u8 {
                    1
                }
            ),
        );
        assert!(out.contains("CatchUnwind :: new (async {"), "{out}");
        assert!(!out.contains("async move"), "{out}");
        assert_eq!(
            out.matches(
                "return { let __resilience_fallback : fn (String , :: resilience_runtime :: \
                 __private :: Downgraded) -> _ = fb ; __resilience_fallback (id , \
                 __resilience_downgraded) . await }"
            )
            .count(),
            2,
            "refused and cut: {out}"
        );
    }

    #[test]
    fn a_key_is_borrowed_for_the_entry_only() {
        let out = expand(
            quote!(key = name, fallback = fb),
            quote!(
                fn f(name: String) -> u8 {
                    1
                }
            ),
        );
        assert!(
            out.contains(
                "let () = match { let __resilience_key = & (name) ; \
                 let __resilience_key_arg = :: resilience_runtime :: __private :: KeyArg :: new (& __resilience_key) ; \
                 :: resilience_runtime :: __private :: enter_keyed (__resilience_point , & mut __resilience_permit , & __resilience_key_arg) } {"
            ),
            "{out}"
        );
        assert!(!out.contains("__private :: enter ("), "{out}");
        // The body still takes the argument.
        assert!(out.contains("move ||"), "{out}");
        assert!(
            out.contains(
                "return { let __resilience_fallback : fn (String) -> _ = fb ; \
                 __resilience_fallback (name) }"
            ),
            "{out}"
        );
    }

    #[test]
    fn an_async_key_lives_through_the_wait() {
        let out = expand(
            quote!(key = self.tenant(), priority = p),
            quote!(
                async fn f(&mut self, p: Priority) -> u8 {
                    1
                }
            ),
        );
        assert!(
            out.contains(
                "{ let __resilience_key = & (self . tenant ()) ; \
                 let __resilience_entered : :: core :: result :: Result < () , :: resilience_runtime :: __private :: Downgraded > = \
                 match { let __resilience_priority = :: resilience_runtime :: __private :: PriorityScope :: enter (p) ; \
                 :: resilience_runtime :: __private :: enter_async_keyed (& mut __resilience_pending , \
                 :: resilience_runtime :: __private :: KeyArg :: new (& __resilience_key)) } {"
            ),
            "{out}"
        );
        let out = run(
            Kind::Breaker,
            quote!(key = id),
            quote!(
                async fn f(id: u64) -> Result<u8, E> {
                    Ok(1)
                }
            ),
            breaker::enter,
        )
        .to_string();
        assert!(
            out.contains("__private :: enter_breaker_async_keyed (& mut __resilience_pending ,"),
            "{out}"
        );
        let out = run(
            Kind::Breaker,
            quote!(key = id),
            quote!(
                fn f(id: u64) -> Result<u8, E> {
                    Ok(1)
                }
            ),
            breaker::enter,
        )
        .to_string();
        assert!(
            out.contains("__private :: enter_breaker_keyed (__resilience_point , & mut __resilience_permit , & __resilience_key_arg)"),
            "{out}"
        );
    }

    #[test]
    fn a_key_naming_no_argument_keeps_the_item() {
        let out = expand(
            quote!(key = usr),
            quote!(
                fn get(user: u64) -> u8 {
                    1
                }
            ),
        );
        assert!(out.starts_with("fn get (user : u64) -> u8 { 1 }"), "{out}");
        assert!(
            out.contains("`key = usr` names no argument of `get`"),
            "{out}"
        );
    }

    #[test]
    fn default_point_name() {
        let out = expand(
            quote!(),
            quote!(
                fn r#type() {}
            ),
        );
        assert!(
            out.contains(":: core :: concat ! (:: core :: module_path ! () , \"::\" , \"type\")"),
            "{out}"
        );
    }

    #[test]
    fn impl_trait_is_inferred_in_the_pin() {
        let out = expand(
            quote!(),
            quote!(
                fn f() -> Result<impl Display, E> {
                    Ok(1)
                }
            ),
        );
        assert!(out.contains("None :: < Result < _ , E > >"), "{out}");
        let out = expand(
            quote!(),
            quote!(
                fn f() -> impl Display {
                    1
                }
            ),
        );
        assert!(!out.contains("__resilience_ret"), "{out}");
    }

    #[test]
    fn never_is_annotated() {
        let out = expand(
            quote!(default),
            quote!(
                fn f() -> ! {
                    loop {}
                }
            ),
        );
        assert!(out.contains("move || -> !"), "{out}");
        assert!(!out.contains("__private :: finish"), "{out}");
    }

    #[test]
    fn async_trait_body_is_guarded_inside_the_future() {
        let out = expand(
            quote!(fallback = Self::fb),
            quote! {
                fn get<'a>(&'a self, id: u64) -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u8, E>> + Send + 'a>> {
                    Box::pin(async move { let __ret: Result<u8, E> = { Ok(1) }; __ret })
                }
            },
        );
        assert!(
            out.contains("{ Box :: pin (async move { let __resilience_point"),
            "{out}"
        );
        assert!(
            out.contains("return Self :: fb (self , id) . await"),
            "{out}"
        );
        assert!(out.contains("None :: < Result < u8 , E > >"), "{out}");
        assert!(out.contains("CatchUnwind :: new (async move"), "{out}");
    }

    #[test]
    fn boxed_body_without_future_return_is_sync() {
        let out = expand(
            quote!(default),
            quote!(
                fn get() -> Box<u8> {
                    Box::pin(async move { 1 })
                }
            ),
        );
        assert!(out.contains("catch_unwind"), "{out}");
    }

    #[test]
    fn future_output_is_found() {
        for (ty, expected) in [
            (quote!(Pin<Box<dyn Future<Output = u8> + Send + 'a>>), "u8"),
            (
                quote!(
                    ::core::pin::Pin<
                        Box<dyn ::core::future::Future<Output = Result<(), E>> + Send>,
                    >
                ),
                "Result < () , E >",
            ),
            (quote!(BoxFuture<'a, u8>), ""),
        ] {
            let ty: Type = syn::parse2(ty).unwrap();
            let found = crate::shape::future_output(&ty).map(|t| t.to_token_stream().to_string());
            assert_eq!(found.as_deref().unwrap_or(""), expected);
        }
    }

    #[test]
    fn renamed_runtime() {
        let out = expand(
            quote!(crate = "crate::rt"),
            quote!(
                fn f() {}
            ),
        );
        assert!(out.contains("crate :: rt :: __private :: enter ("), "{out}");
        assert!(!out.contains("resilience_runtime"), "{out}");
    }

    #[test]
    fn errors_keep_the_item() {
        let out = expand(
            quote!(fallbak = f),
            quote!(
                fn f() -> u8 {
                    1
                }
            ),
        );
        assert!(out.starts_with("fn f () -> u8 { 1 }"), "{out}");
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("unknown argument `fallbak`"), "{out}");
    }

    #[test]
    fn errors_from_every_stage_are_combined() {
        let out = expand(
            quote!(point = ""),
            quote!(
                const fn f() -> u8 {
                    1
                }
            ),
        );
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
    }

    #[test]
    fn non_fn_item_is_kept() {
        let out = expand(
            quote!(),
            quote!(
                struct S;
            ),
        );
        assert!(out.starts_with("struct S ;"), "{out}");
        assert!(out.contains("can only be applied to functions"), "{out}");
    }
}
