//! The `resilience-admin` server binary; see `--help`.

use resilience_admin::cli;
use resilience_admin::server::{Server, StorageConfig};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("resilience-admin: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.help {
        print!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    let config = cli.config;
    let server = match Server::new(&config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("resilience-admin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("resilience-admin: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.bind).await?;
        let addr = listener.local_addr()?;
        let storage = match &config.storage {
            StorageConfig::Sqlite(p) => format!("SQLite file {}", p.display()),
            StorageConfig::Memory => "memory (lost on exit)".to_owned(),
            StorageConfig::Postgres(_) => "PostgreSQL".to_owned(),
        };
        let scheme = if server.is_https() { "https" } else { "http" };
        // The one line scripts wait for: it carries the bound port (with --bind :0).
        println!("resilience-admin listening on {scheme}://{addr} (storage: {storage})");
        if !addr.ip().is_loopback() && !server.is_https() {
            eprintln!(
                "resilience-admin: listening on {addr}, reachable from other machines; \
                 traffic is plain HTTP, tokens included: serve https with --tls-cert \
                 and --tls-key"
            );
        }
        if cli.generated_admin_token {
            println!("admin token (generated): {}", config.admin_token.expose());
        }
        if cli.generated_app_token {
            if let Some(t) = config.app_tokens.first() {
                println!("app token (generated): {}", t.token.expose());
            }
        }
        println!("dashboard: {scheme}://{addr}/");
        server
            .serve(listener, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resilience-admin: {e}");
            ExitCode::FAILURE
        }
    }
}
