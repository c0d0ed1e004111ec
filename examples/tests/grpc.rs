//! The `grpc_echo` service over a real loopback connection (tonic server and client):
//! a point's refusals reach the client as gRPC statuses.

use examples::grpc::{say, EchoServer};
use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::retry::Backoff;
use resilience_runtime::tower::PointLayer;
use resilience_runtime::{registry, BreakerPolicy, Policy};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};

/// Serves `Say` on loopback behind the point `name` (gRPC mode); the handler sleeps
/// for "sleep N" (ms) and fails `INTERNAL` for "fail".
async fn serve(name: &str) -> (Channel, tokio::task::JoinHandle<()>) {
    let echo = EchoServer::new(|msg: String| async move {
        if let Some(ms) = msg.strip_prefix("sleep ") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
        }
        if msg == "fail" {
            return Err(Status::internal("backend failed"));
        }
        Ok(format!("echo: {msg}"))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(
            PointLayer::new(name)
                .unwrap()
                .retry_after(Duration::from_millis(1500))
                .grpc(),
        )
        .add_service(echo)
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    let server = tokio::spawn(async move { server.await.unwrap() });
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (channel, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_resource_exhausted_with_pushback() {
    let name = "examples.grpc.limit";
    registry()
        .set_policy(name, Policy::builder().max_concurrency(1).build().unwrap())
        .unwrap();
    let (channel, server) = serve(name).await;
    assert_eq!(say(channel.clone(), "hi").await.unwrap(), "echo: hi");
    let held = tokio::spawn(say(channel.clone(), "sleep 300"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = say(channel.clone(), "hi").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(
        refused.message(),
        "`examples.grpc.limit` refused the request (concurrency)"
    );
    assert_eq!(
        refused.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "1500"
    );
    assert_eq!(held.await.unwrap().unwrap(), "echo: sleep 300");
    // A handler's own error passes through, and counts as a failure.
    let failed = say(channel.clone(), "fail").await.unwrap_err();
    assert_eq!(failed.code(), Code::Internal);
    let t = registry().stats(name).unwrap().totals;
    assert_eq!((t.passes, t.downgrades, t.exceptions), (3, 1, 1));
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_answers_deadline_exceeded_and_opens_the_breaker() {
    let name = "examples.grpc.deadline";
    let policy = Policy::builder()
        .call_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    registry().set_policy(name, policy).unwrap();
    let breaker = ClassicConfig::builder()
        .consecutive_failures(1)
        .open_wait(Backoff::fixed(Duration::from_secs(20)))
        .build()
        .unwrap();
    registry()
        .set_breaker(name, BreakerPolicy::Classic(breaker))
        .unwrap();
    let (channel, server) = serve(name).await;
    let started = Instant::now();
    let cut = say(channel.clone(), "sleep 5000").await.unwrap_err();
    assert_eq!(cut.code(), Code::DeadlineExceeded);
    assert!(started.elapsed() < Duration::from_secs(2), "cut at 100 ms");
    // The cut was a failure: the breaker is open, and says for how long.
    let open = say(channel.clone(), "hi").await.unwrap_err();
    assert_eq!(open.code(), Code::Unavailable);
    let pushback: u64 = open
        .metadata()
        .get("grpc-retry-pushback-ms")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (18_000..=20_000).contains(&pushback),
        "{pushback} ms of the breaker's 20 s"
    );
    let t = registry().stats(name).unwrap().totals;
    assert_eq!((t.timeouts, t.downgrades), (1, 1));
    server.abort();
}
