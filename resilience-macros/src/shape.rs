//! How a wrapped function's body runs (sync, `async fn`, or the boxed future of an
//! `#[async_trait]` method): read by `validate` (a deadline needs a future) and by
//! `expand` (how the body is caught and awaited).

use proc_macro2::Span;
use syn::{GenericArgument, PathArguments, ReturnType, Signature, Type};

use crate::item::{BoxedFuture, ItemFn, SplitBody};

/// Whether the body runs as a future, so that a deadline can cut it: an
/// `async fn`, or the boxed future of an `#[async_trait]` method.
pub(crate) fn runs_async(item: &ItemFn) -> bool {
    item.sig.asyncness.is_some()
        || item
            .body
            .split()
            .is_some_and(|split| matches!(Shape::of(&item.sig, &split), Shape::Boxed { .. }))
}

/// How the body runs, which decides how it is caught and awaited.
pub(crate) enum Shape {
    /// A plain fn: the body runs in a closure under `catch_unwind`.
    Sync,
    /// An `async fn`: the body runs in an `async move` block, awaited in place.
    Async {
        /// The `async` keyword, where an `.await` of ours belongs.
        await_span: Span,
    },
    /// A fn whose body is exactly `Box::pin(async move { .. })` and whose
    /// return type names `Future<Output = R>`: what `#[async_trait]`, which
    /// always expands before us, makes of an `async fn`. Treated as an
    /// `async fn .. -> R` whose guard runs inside the boxed future, so that
    /// the call's execution is guarded, not the creation of its future.
    Boxed {
        /// The `Box::pin(async move { .. })` body.
        future: Box<BoxedFuture>,
        /// `R`.
        output: Box<Type>,
    },
}

impl Shape {
    pub(crate) fn of(sig: &Signature, split: &SplitBody) -> Self {
        if let Some(asyncness) = &sig.asyncness {
            return Shape::Async {
                await_span: asyncness.span,
            };
        }
        let output = match &sig.output {
            ReturnType::Type(_, ty) => future_output(ty),
            ReturnType::Default => None,
        };
        match (split.boxed_future(), output) {
            (Some(future), Some(output)) => Shape::Boxed {
                future: Box::new(future),
                output: Box::new(output.clone()),
            },
            _ => Shape::Sync,
        }
    }

    /// Where an `.await` of ours belongs (`None` for a sync fn).
    pub(crate) fn await_span(&self) -> Option<Span> {
        match self {
            Shape::Sync => None,
            Shape::Async { await_span } => Some(*await_span),
            Shape::Boxed { future, .. } => Some(future.async_span),
        }
    }
}

/// `R` in a return type such as `Pin<Box<dyn Future<Output = R> + Send + 'a>>`.
pub(crate) fn future_output(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) => path_future_output(&path.path),
        Type::TraitObject(object) => object.bounds.iter().find_map(|bound| match bound {
            syn::TypeParamBound::Trait(bound) => path_future_output(&bound.path),
            _ => None,
        }),
        Type::Paren(paren) => future_output(&paren.elem),
        Type::Group(group) => future_output(&group.elem),
        _ => None,
    }
}

/// `R` in `Future<Output = R>`, or in a type argument of the path (`Box<..>`).
fn path_future_output(path: &syn::Path) -> Option<&Type> {
    path.segments.iter().find_map(|segment| {
        let PathArguments::AngleBracketed(generics) = &segment.arguments else {
            return None;
        };
        generics.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc)
                if segment.ident == "Future" && assoc.ident == "Output" =>
            {
                Some(&assoc.ty)
            }
            GenericArgument::Type(ty) => future_output(ty),
            _ => None,
        })
    })
}
