//! The builders of the configuration types: [`builder!`] writes a configuration's
//! builder (its struct, one setter per setting and `build`), so every configuration
//! of the crate is made the same way: `X::builder()`, setters named after the
//! fields, `build()?`.
//!
//! Like `Policy::builder()` (written by hand, as its setters take several values
//! each), a builder holds the configuration being built, starting from the defaults
//! that `X::builder()` gives it; `build` runs the configuration's checks, so an
//! invalid setting is an error naming its field, never silently replaced.
//!
//! The macro writes only the builder: `X::builder()` is written next to the type, with
//! its defaults and an example, and setters that need more than "store this value"
//! (an `impl Into<String>`, a closure) go in an `impl XBuilder` block of their own.

/// Writes a builder of a configuration type.
///
/// ```text
/// builder! {
///     /// Docs of the builder struct.
///     pub struct ClassicConfigBuilder => ClassicConfig;
///
///     /// Docs of `build`, with its `# Errors`.
///     build -> Result<FieldError> = ClassicConfig::validate;  // or `build -> Infallible;`
///
///     /// Docs of the setter (each setter has its own).
///     failure_rate: f64,
///     /// An `Option<T>` field's setter takes a `T` and stores `Some(value)`.
///     slow_call_rate: Option<f64>,
/// }
/// ```
///
/// The builder holds one private field, `config`, the configuration being built; the
/// type's `builder()` makes it (`XBuilder { config: .. }`), in the same module. The
/// check is a `fn(&X) -> Result<(), E>`.
macro_rules! builder {
    (
        $(#[$meta:meta])*
        $vis:vis struct $Builder:ident => $Config:ident;

        $(#[$build_meta:meta])*
        build -> Result<$Error:ty> = $check:path;

        $($setters:tt)*
    ) => {
        $crate::builder::builder!(@struct $(#[$meta])* $vis $Builder $Config);

        impl $Builder {
            $crate::builder::builder!(@setters [$vis] $($setters)*);

            $(#[$build_meta])*
            $vis fn build(self) -> ::core::result::Result<$Config, $Error> {
                $check(&self.config)?;
                ::core::result::Result::Ok(self.config)
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $Builder:ident => $Config:ident;

        $(#[$build_meta:meta])*
        build -> Infallible;

        $($setters:tt)*
    ) => {
        $crate::builder::builder!(@struct $(#[$meta])* $vis $Builder $Config);

        impl $Builder {
            $crate::builder::builder!(@setters [$vis] $($setters)*);

            $(#[$build_meta])*
            $vis fn build(self) -> $Config {
                self.config
            }
        }
    };

    (@struct $(#[$meta:meta])* $vis:vis $Builder:ident $Config:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug)]
        #[must_use = "a builder does nothing until `build` is called"]
        $vis struct $Builder {
            config: $Config,
        }
    };

    // One setter at a time, so that `Option<T>` fields can be told apart.
    (@setters [$vis:vis]) => {};
    (@setters [$vis:vis] $(#[$m:meta])* $field:ident : Option<$t:ty> $(, $($rest:tt)*)?) => {
        $(#[$m])*
        #[must_use = "a setter returns the changed builder"]
        $vis fn $field(mut self, $field: $t) -> Self {
            self.config.$field = ::core::option::Option::Some($field);
            self
        }
        $crate::builder::builder!(@setters [$vis] $($($rest)*)?);
    };
    (@setters [$vis:vis] $(#[$m:meta])* $field:ident : $t:ty $(, $($rest:tt)*)?) => {
        $(#[$m])*
        #[must_use = "a setter returns the changed builder"]
        $vis fn $field(mut self, $field: $t) -> Self {
            self.config.$field = $field;
            self
        }
        $crate::builder::builder!(@setters [$vis] $($($rest)*)?);
    };
}

pub(crate) use builder;
