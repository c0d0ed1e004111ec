//! A tiny gRPC service without protoc: one unary method, `/resilience.example.Echo/Say`,
//! whose messages are UTF-8 strings ([`Utf8Codec`], a hand-written tonic codec), the
//! server side written as tonic's code generator would ([`EchoServer`]) and a client
//! call ([`say`]). Shared by the `grpc_echo` example and its loopback test.

use bytes::{Buf, BufMut};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

/// The service's name, as a `.proto` file would give it.
pub const SERVICE: &str = "resilience.example.Echo";
/// The one method's path.
pub const SAY: &str = "/resilience.example.Echo/Say";

/// A codec whose messages are UTF-8 strings (protobuf is not needed for one string).
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8Codec;

impl Codec for Utf8Codec {
    type Encode = String;
    type Decode = String;
    type Encoder = Utf8Codec;
    type Decoder = Utf8Codec;

    fn encoder(&mut self) -> Utf8Codec {
        Utf8Codec
    }

    fn decoder(&mut self) -> Utf8Codec {
        Utf8Codec
    }
}

impl Encoder for Utf8Codec {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for Utf8Codec {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

/// The handler of `Say`: a message in, a reply or a status out.
pub type Handler = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<String, Status>> + Send>> + Send + Sync,
>;

/// The server side of `Echo`: routes `Say` to its handler, answers anything else
/// `UNIMPLEMENTED` (what tonic's generated servers do).
#[derive(Clone)]
pub struct EchoServer {
    handler: Handler,
}

impl std::fmt::Debug for EchoServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoServer").finish_non_exhaustive()
    }
}

impl EchoServer {
    /// A server whose `Say` runs `handler`.
    pub fn new<F, Fut>(handler: F) -> EchoServer
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, Status>> + Send + 'static,
    {
        EchoServer {
            handler: Arc::new(move |msg| Box::pin(handler(msg))),
        }
    }
}

impl NamedService for EchoServer {
    const NAME: &'static str = SERVICE;
}

/// `Say` as tonic's `UnaryService`.
struct Say(Handler);

impl tonic::server::UnaryService<String> for Say {
    type Response = String;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Status>> + Send>>;

    fn call(&mut self, request: Request<String>) -> Self::Future {
        let reply = (self.0)(request.into_inner());
        Box::pin(async move { reply.await.map(Response::new) })
    }
}

impl tower::Service<http::Request<Body>> for EchoServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let handler = self.handler.clone();
        Box::pin(async move {
            if req.uri().path() != SAY {
                return Ok(Status::unimplemented(req.uri().path().to_owned()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(Utf8Codec);
            Ok(grpc.unary(Say(handler), req).await)
        })
    }
}

/// Calls `Say` over `channel` (or any gRPC client service, a guarded one included).
///
/// # Errors
///
/// The status the server (or a layer on the way) answered with.
pub async fn say<T>(channel: T, msg: &str) -> Result<String, Status>
where
    T: tonic::client::GrpcService<Body>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut client = tonic::client::Grpc::new(channel);
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(e.into().to_string()))?;
    let path = http::uri::PathAndQuery::from_static(SAY);
    let reply = client
        .unary(Request::new(msg.to_owned()), path, Utf8Codec)
        .await?;
    Ok(reply.into_inner())
}
