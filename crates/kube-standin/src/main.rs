//! `kube-standin`: the API server stand-in as a process, for kubectl and the Python client.
//! Prints `listening on http://ADDR` once it serves, and writes a kubeconfig if asked.

use clap::Parser;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "A Kubernetes API server stand-in for tests")]
struct Args {
    /// Where to listen (port 0: a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Write a kubeconfig pointing here to this file.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Milliseconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 1000)]
    bookmark_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let s =
        tollgate_kube_standin::StandIn::start(args.listen, Duration::from_millis(args.bookmark_ms))
            .await?;
    if let Some(path) = &args.kubeconfig {
        std::fs::write(path, s.kubeconfig())?;
    }
    println!("listening on {}", s.url());
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}
