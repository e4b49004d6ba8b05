//! `flotilla-example-platform-webhook --kubeconfig HUB --listen 127.0.0.1:7446 --ca-file
//! ca.crt`: the platform example's referential-integrity webhook (see the library).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// The platform example's referential-integrity admission webhook.
#[derive(Parser)]
struct Args {
    /// The hub's kubeconfig (the webhook reads Platforms and Tiers there).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Where to serve HTTPS.
    #[arg(long, default_value = "127.0.0.1:7446")]
    listen: SocketAddr,
    /// Where to write the CA certificate (PEM) that the configuration's caBundle holds.
    #[arg(long, default_value = "platform-webhook-ca.crt")]
    ca_file: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let hub = flotilla_example_platform_webhook::client(&args.kubeconfig).await?;
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        flotilla_example_platform_webhook::serve(
            args.listen,
            hub,
            &args.ca_file,
            |at| eprintln!("serving https://{at}/validate"),
            stop,
        )
        .await?;
        Ok(())
    })
}
