//! A gRPC service (tonic) guarded by a point: refusals reach the client as gRPC
//! statuses, `RESOURCE_EXHAUSTED` for a limit, `DEADLINE_EXCEEDED` for a call cut at
//! the policy's `call_timeout`, `UNAVAILABLE` for an open breaker, with the server's
//! pushback (`grpc-retry-pushback-ms`) when the wait is known.
//!
//! ```sh
//! cargo run -p examples --example grpc_echo
//! ```
//!
//! The service is defined without protoc (`examples::grpc`: a UTF-8 codec and the
//! server side tonic would generate). The server and the client talk over loopback
//! TCP; `examples/tests/grpc.rs` checks the same over a real connection.

use examples::grpc::{say, EchoServer};
use resilience_runtime::tower::PointLayer;
use resilience_runtime::{registry, Policy};
use std::time::Duration;
use tonic::transport::{Endpoint, Server};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // One call at a time; a call still running after 200 ms is cut.
    let policy = Policy::builder()
        .max_concurrency(1)
        .call_timeout(Duration::from_millis(200))
        .build()?;
    registry().set_policy("grpc.echo", policy)?;
    let echo = EchoServer::new(|msg: String| async move {
        if let Some(ms) = msg.strip_prefix("sleep ") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
        }
        Ok(format!("echo: {msg}"))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Server::builder()
        .layer(
            PointLayer::new("grpc.echo")?
                .retry_after(Duration::from_millis(250))
                .grpc(),
        )
        .add_service(echo)
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    let server = tokio::spawn(server);

    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    println!("hello       -> {:?}", say(channel.clone(), "hello").await);
    // Two at once against one slot: the second is refused.
    let (a, b) = tokio::join!(
        say(channel.clone(), "sleep 100"),
        say(channel.clone(), "sleep 100")
    );
    for r in [a, b] {
        match r {
            Ok(reply) => println!("concurrent  -> {reply}"),
            Err(status) => println!(
                "concurrent  -> {:?}: {} (pushback {:?} ms)",
                status.code(),
                status.message(),
                status.metadata().get("grpc-retry-pushback-ms")
            ),
        }
    }
    let cut = say(channel.clone(), "sleep 1000").await.unwrap_err();
    println!("sleep 1000  -> {:?}: {}", cut.code(), cut.message());
    server.abort();
    Ok(())
}
