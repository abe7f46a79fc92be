//! `tollgate`: the command line, logging, and the wiring of Pingora services. No policy here.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use pingora::apps::HttpServerOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::proxy::HttpProxy;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};
use tollgate_config::model::{Config, ServerConfig};
use tollgate_proxy::admin::Admin;
use tollgate_proxy::housekeeping::Housekeeping;
use tollgate_proxy::{Gateway, Shared};

#[cfg(not(feature = "system-alloc"))]
mod added;
mod alloc;
mod kubernetes;

/// mimalloc, except in a build for a heap profiler (`--features system-alloc`: heaptrack
/// and valgrind's massif see only the C library's malloc; bench/README.md, "Memory").
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

/// After a config was read (and a runtime built, at start and after each reload): the pages
/// the calling thread freed go back to the system. At 15,000 routes the parse's TOML tokens
/// and tables are ~110 MB transient, which mimalloc would otherwise keep as RSS. A no-op with
/// the C library's malloc.
fn release_freed() {
    // SAFETY: mi_collect takes no pointer; it only walks the calling thread's heap.
    #[cfg(not(feature = "system-alloc"))]
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    }
}

const DEFAULT_CONFIG: &str = "conf/tollgate.toml";

/// Bytes of read buffer per downstream connection (see `run`).
const L4_READ_BUFFER: usize = 0;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "An API gateway with serious rate limiting, on Pingora"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve. The config is --config, else $TOLLGATE_CONFIG, else conf/tollgate.toml.
    Run {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Take the listening sockets over from a running tollgate (then SIGQUIT the old one).
        #[arg(long)]
        upgrade: bool,
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        #[command(flatten)]
        kube: kubernetes::KubeArgs,
    },
    /// Validate config files without serving: exit 0, or 2 with one line per problem.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Check each file as `run --kubernetes` reads its BASE.toml: with TLS listeners and no
        /// certificate of its own, the default certificate the controller serves.
        #[arg(long)]
        kubernetes: bool,
    },
    /// Explain what the gateway does with one request and why: its canonical form, the route
    /// taken (and those not), access lists, authentication, each limit's key, state and
    /// decision. Exit 0 when it would be admitted, 1 when answered otherwise, 2 on bad input.
    Explain(ExplainArgs),
    /// Replay access logs through the config's routes and limits on a virtual clock and report
    /// what each limit would have admitted and refused (and at x0.5, x2, x4).
    Simulate(SimulateArgs),
    /// Translate Kubernetes Ingress objects and their ingress-nginx annotations into a Tollgate
    /// config: TOML on stdout (or --output), what could not be translated on stderr. Exit 3
    /// when a route had to answer 403 because a protection of it has no translation.
    ImportIngress {
        /// A YAML file of Ingress objects (several documents, or a kind: List); - for stdin.
        file: PathBuf,
        /// Write the config to this file instead of stdout (checked before it is written).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Only Ingresses of this class (ingressClassName or kubernetes.io/ingress.class), and
        /// those without a class.
        #[arg(long, default_value = "nginx")]
        ingress_class: String,
        /// Serve routes whose protection (auth-url, a snippet, ...) cannot be translated,
        /// without it, instead of making them answer 403.
        #[arg(long)]
        allow_insecure: bool,
        /// Honour the ssl-passthrough annotation (ingress-nginx's flag; without it the
        /// annotation is ignored, as there).
        #[arg(long)]
        enable_ssl_passthrough: bool,
        /// The controller's ConfigMap (NAMESPACE/NAME) among the input's objects: its keys
        /// Tollgate maps become [server] settings. Default: ingress-nginx-controller (or
        /// nginx-configuration), when the input holds one.
        #[arg(long)]
        configmap: Option<String>,
    },
    /// The rate limits of ingress-nginx Ingresses as RateLimitPolicies (tollgate.io/v1alpha1)
    /// on the HTTPRoutes and GRPCRoutes ingress2gateway writes from the same Ingresses, which
    /// carry no limits: YAML on stdout (or --output), what a policy cannot say on stderr.
    ImportIngressLimits {
        /// A YAML file of Ingress objects (several documents, or a kind: List); - for stdin.
        file: PathBuf,
        /// Write the policies to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Only Ingresses of this class (and those without one): ingress2gateway's
        /// --ingress-nginx-ingress-class, and the name of the Gateway it writes.
        #[arg(long, default_value = "nginx")]
        ingress_class: String,
    },
    /// Translate envoyproxy/ratelimit's configuration (its YAML files, one domain a file, or
    /// its runtime directory) into [[rls.domains]], looked up and counted as that service does:
    /// TOML on stdout (or --output), notes on stderr. What the service refuses is refused (exit
    /// 2), each problem with its file, key path and line.
    ImportEnvoyRatelimit {
        /// The service's config files, or a directory of them (its runtime directory: its
        /// `config/` folder when it has one), read in name order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the config to this file instead of stdout (checked before it is written).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// How the limits count: counting_window (as envoyproxy/ratelimit counts) or a rate
        /// algorithm (fixed_window, sliding_window, token_bucket, ...).
        #[arg(long, default_value = "counting_window")]
        algorithm: String,
        /// [redis] url to write.
        #[arg(long, default_value = "redis://127.0.0.1:6379")]
        redis_url: String,
        /// [rls] listen to write.
        #[arg(long, default_value = "0.0.0.0:8081")]
        listen: String,
        /// MERGE_DOMAIN_CONFIG: files naming one domain add their descriptors to it.
        #[arg(long)]
        merge_domains: bool,
        /// LIMIT_RESPONSE_HEADERS_ENABLED: none (the service's default), envoy (RateLimit-Limit,
        /// -Remaining, -Reset) or ietf (Tollgate's RateLimit-Policy and RateLimit).
        #[arg(long, default_value = "none")]
        response_headers: String,
        /// SHADOW_MODE: every call answered OK overall.
        #[arg(long)]
        shadow_mode: bool,
        /// RESPONSE_DYNAMIC_METADATA: answers carry dynamic_metadata.
        #[arg(long)]
        dynamic_metadata: bool,
        /// LOCAL_CACHE_SIZE_IN_BYTES above 0: counts known past their limit are answered from
        /// memory until their window ends (no Redis call; those counts stop growing).
        #[arg(long)]
        local_cache: bool,
        /// Global quota mode: a call is over the limit only when every descriptor is.
        #[arg(long)]
        quota_mode: bool,
        /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a call with a descriptor that would pass its
        /// limit counts only the descriptors that would.
        #[arg(long)]
        stop_increment_when_over_limit: bool,
        /// RUNTIME_IGNOREDOTFILES=false (the service's default): a directory's hidden files and
        /// folders are read too. Left out by default, as the service's README advises for a
        /// ConfigMap (whose hidden `..DATE` folder holds every file a second time).
        #[arg(long)]
        dot_files: bool,
    },
}

/// `tollgate explain`'s options.
#[derive(clap::Args)]
struct ExplainArgs {
    #[arg(long)]
    config: Option<PathBuf>,
    /// Read each global limit's state from this Redis node.
    #[arg(long)]
    redis: Option<String>,
    /// Ask a running gateway's admin listener (http://127.0.0.1:9000): its own limits' state.
    #[arg(long)]
    admin: Option<String>,
    /// The admin token (else the config's server.admin_token).
    #[arg(long)]
    admin_token: Option<String>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
    /// After --: METHOD URL [-H 'Name: value']... [--from ADDR] [--json]
    #[arg(last = true, required = true, value_name = "REQUEST")]
    request: Vec<String>,
}

/// `tollgate simulate`'s options.
#[derive(clap::Args)]
struct SimulateArgs {
    #[arg(long)]
    config: Option<PathBuf>,
    /// Access logs: Tollgate's JSON log, nginx's combined or JSON format, or CSV.
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report, a chart per limit.
    #[arg(long, value_name = "OUT")]
    html: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check { files, kubernetes } => check(&files, kubernetes),
        Command::Explain(a) => explain(a),
        Command::Simulate(a) => simulate(a),
        Command::ImportIngress {
            file,
            output,
            ingress_class,
            allow_insecure,
            enable_ssl_passthrough,
            configmap,
        } => import_ingress(
            &file,
            output.as_deref(),
            &tollgate_ingress::Options {
                ingress_class,
                allow_insecure,
                configmap,
                preselected: false,
                ssl_passthrough: enable_ssl_passthrough,
            },
        ),
        Command::ImportIngressLimits {
            file,
            output,
            ingress_class,
        } => import_ingress_limits(&file, output.as_deref(), ingress_class),
        Command::ImportEnvoyRatelimit {
            files,
            output,
            algorithm,
            redis_url,
            listen,
            merge_domains,
            response_headers,
            shadow_mode,
            dynamic_metadata,
            local_cache,
            quota_mode,
            stop_increment_when_over_limit,
            dot_files,
        } => import_envoy_ratelimit(
            &files,
            output.as_deref(),
            dot_files,
            &tollgate_config::envoy_ratelimit::Options {
                algorithm,
                redis_url,
                listen,
                merge_domains,
                response_headers,
                shadow_mode,
                dynamic_metadata,
                local_cache,
                quota_mode,
                stop_increment_when_over: stop_increment_when_over_limit,
            },
        ),
        Command::Run {
            config,
            upgrade,
            log_format,
            kube,
        } => {
            init_logging(log_format);
            match run(config, upgrade, kube) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("tollgate: {e:#}");
                    1
                }
            }
        }
    };
    std::process::exit(code);
}

/// The files under `dir`, in name order; hidden ones (the kubelet's `..data`) left out unless
/// `dot_files`.
fn files_under(dir: &Path, dot_files: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            dot_files
                || !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    entries.sort();
    for p in entries {
        // A folder linked (the kubelet's `..data`) is not entered, as Go's filepath.Walk
        // enters none.
        let linked = p
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if p.is_dir() {
            if !linked {
                files_under(&p, dot_files, out)?;
            }
        } else {
            out.push(p);
        }
    }
    Ok(())
}

fn import_envoy_ratelimit(
    files: &[PathBuf],
    output: Option<&Path>,
    dot_files: bool,
    opts: &tollgate_config::envoy_ratelimit::Options,
) -> i32 {
    let mut paths = Vec::new();
    for f in files {
        if f.is_dir() {
            // The service's runtime directory keeps its files in config/.
            let dir = match f.join("config") {
                c if c.is_dir() => c,
                _ => f.clone(),
            };
            if let Err(e) = files_under(&dir, dot_files, &mut paths) {
                eprintln!("{}: cannot read the directory: {e}", dir.display());
                return 2;
            }
        } else {
            paths.push(f.clone());
        }
    }
    let mut texts = Vec::new();
    for f in &paths {
        match std::fs::read_to_string(f) {
            Ok(s) => {
                let name = f.file_name().map_or_else(
                    || f.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                texts.push((name, s));
            }
            Err(e) => {
                eprintln!("{}: cannot read the file: {e}", f.display());
                return 2;
            }
        }
    }
    let imported = match tollgate_config::envoy_ratelimit::import(&texts, opts) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return 2;
        }
    };
    if let Err(e) = tollgate_config::check_str(&imported.toml, "import-envoy-ratelimit output") {
        eprintln!("tollgate: the translation does not validate:\n{e}");
        return 2;
    }
    emit(
        &imported.toml,
        &imported.warnings,
        output,
        &format!("{} rules", imported.rules),
    )
}

/// An import's output: its warnings on stderr, the TOML to `output` (then what was written,
/// `what`, on stderr) or stdout. 0, or 2 when the file cannot be written.
fn emit(toml: &str, warnings: &[String], output: Option<&Path>, what: &str) -> i32 {
    for w in warnings {
        // Text from the input: no control character reaches the terminal.
        let w: String = w
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        eprintln!("warning: {w}");
    }
    match output {
        Some(out) => {
            if let Err(e) = std::fs::write(out, toml) {
                eprintln!("{}: cannot write: {e}", out.display());
                return 2;
            }
            eprintln!("{}: {what}", out.display());
        }
        None => print!("{toml}"),
    }
    0
}

/// A file's text, `-` for standard input; `None` (said) when it cannot be read.
fn read_input(file: &Path) -> Option<String> {
    let mut s = String::new();
    let read = if file == Path::new("-") {
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(file)
    };
    read.map_err(|e| eprintln!("{}: cannot read the file: {e}", file.display()))
        .ok()
}

fn import_ingress_limits(file: &Path, output: Option<&Path>, ingress_class: String) -> i32 {
    let Some(text) = read_input(file) else {
        return 2;
    };
    let opts = tollgate_ingress::Options {
        ingress_class,
        ..Default::default()
    };
    let c = match tollgate_gateway_api::from_ingress::limit_policies(&text, &opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return 2;
        }
    };
    let mut yaml = String::from(
        "# Made by `tollgate import-ingress-limits`: the Ingresses' rate limits, on the routes\n# ingress2gateway writes from them (docs/gateway-api.md, \"From ingress-nginx\").\n",
    );
    for w in &c.warnings {
        let w: String = w
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        yaml.push_str(&format!("# warning: {w}\n"));
    }
    yaml.push_str(&c.yaml);
    emit(
        &yaml,
        &c.warnings,
        output,
        &format!("{} RateLimitPolicies", c.policies),
    )
}

fn import_ingress(file: &Path, output: Option<&Path>, opts: &tollgate_ingress::Options) -> i32 {
    let Some(text) = read_input(file) else {
        return 2;
    };
    let imported = match tollgate_ingress::import(&text, opts) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return 2;
        }
    };
    // What is printed must be what `tollgate check` accepts.
    if let Err(e) = tollgate_config::check_import_str(&imported.toml, "import-ingress output") {
        eprintln!("tollgate: the translation does not validate (a bug; please report it):\n{e}");
        return 1;
    }
    let written = emit(
        &imported.toml,
        &imported.warnings,
        output,
        &format!("{} routes", imported.routes),
    );
    if written != 0 {
        return written;
    }
    let list = |v: &[tollgate_ingress::Denied]| {
        v.iter()
            .map(|d| format!("  {} ({})", d.route, d.annotations.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !imported.unprotected.is_empty() {
        eprintln!(
            "tollgate: --allow-insecure: {} route(s) served without a protection their Ingress asked for:\n{}",
            imported.unprotected.len(),
            list(&imported.unprotected)
        );
    }
    if !imported.denied.is_empty() {
        // A protection that could not be kept became a deny-all route: say so by the exit
        // status too, so a pipeline does not deploy the output unread.
        eprintln!(
            "tollgate: {} route(s) answer 403 because a protection could not be translated (exit 3; --allow-insecure serves them without it):\n{}",
            imported.denied.len(),
            list(&imported.denied)
        );
        return 3;
    }
    0
}

/// Loads a config for the tools (explain, simulate): `--config`, else $TOLLGATE_CONFIG, else
/// the default; problems printed.
fn tool_config(flag: Option<PathBuf>) -> Result<Config, i32> {
    let path = config_path(flag);
    tollgate_config::check_file(&path).map_err(|e| {
        for line in e.lines() {
            eprintln!("{line}");
        }
        2
    })
}

fn explain(a: ExplainArgs) -> i32 {
    use tollgate_proxy::tools::explain::{split_header, Question};
    let config = match tool_config(a.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut json = a.json;
    let mut positional = Vec::new();
    let mut headers = Vec::new();
    let mut from = None;
    let mut it = a.request.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-H" | "--header" => match it.next().map(|h| split_header(&h)) {
                Some(Ok(h)) => headers.push(h),
                Some(Err(e)) => return usage(&e),
                None => return usage("-H needs 'Name: value'"),
            },
            "--from" => match it.next().map(|f| f.parse::<std::net::IpAddr>()) {
                Some(Ok(ip)) => from = Some(ip),
                _ => return usage("--from needs an IP address"),
            },
            "--json" => json = true,
            _ => positional.push(arg),
        }
    }
    let [method, url] = <[String; 2]>::try_from(positional)
        .map_err(|_| ())
        .unwrap_or_default();
    if method.is_empty() || url.is_empty() {
        return usage("after --, give METHOD URL (then -H 'Name: value'..., --from ADDR)");
    }
    let q = Question {
        method,
        url,
        headers,
        from: from.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])),
    };
    let src = tollgate_proxy::tools::explain::Source {
        admin: a.admin,
        token: a.admin_token,
        redis: a.redis,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage(&e.to_string()),
    };
    match rt.block_on(tollgate_proxy::tools::explain::cli(config, &q, &src)) {
        Ok(v) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", tollgate_proxy::tools::explain::text(&v));
            }
            // Admitted: proxied or the route's own answer, with no refusal.
            let answer = v["decision"]["answer"].as_str().unwrap_or_default();
            i32::from(!matches!(answer, "proxied" | "respond"))
        }
        Err(e) => usage(&e),
    }
}

fn simulate(a: SimulateArgs) -> i32 {
    let config = match tool_config(a.config.clone()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let name = config_path(a.config).display().to_string();
    match tollgate_proxy::tools::simulate::run(config, &name, &a.logs) {
        Ok(report) => {
            if let Some(out) = &a.html {
                if let Err(e) = std::fs::write(out, tollgate_replay::html(&report)) {
                    return usage(&format!("{}: {e}", out.display()));
                }
            }
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print!("{}", tollgate_proxy::tools::simulate::text(&report));
            }
            0
        }
        Err(e) => usage(&e),
    }
}

fn usage(why: &str) -> i32 {
    eprintln!("tollgate: {why}");
    2
}

fn check(files: &[PathBuf], kubernetes: bool) -> i32 {
    let mut bad = false;
    for f in files {
        let checked = if kubernetes {
            kubernetes::check_base(f)
        } else {
            tollgate_config::check_file(f).map_err(|e| e.to_string())
        };
        match checked {
            Ok(cfg) => match certificates_ok(&cfg) {
                Ok(()) => {
                    for w in tollgate_config::warnings(&cfg) {
                        eprintln!("{}: warning: {w}", f.display());
                    }
                    println!("{}: ok", f.display())
                }
                Err(errors) => {
                    bad = true;
                    for e in errors {
                        println!("{}: {e}", f.display());
                    }
                }
            },
            Err(e) => {
                bad = true;
                for line in e.lines() {
                    println!("{line}");
                }
            }
        }
    }
    if bad {
        2
    } else {
        0
    }
}

/// The certificates `[tls]` and the upstreams name load as they would at start (PEM,
/// matching keys, not expired).
fn certificates_ok(cfg: &Config) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    if let Some(tls) = &cfg.tls {
        errors.extend(
            tollgate_core::tls::listener::check(tls)
                .err()
                .unwrap_or_default(),
        );
    }
    // Upstream CA bundles and client certificates, as the runtime will read them.
    for u in &cfg.upstreams {
        if let Some(t) = &u.tls {
            for target in &u.targets {
                if let Err(e) = tollgate_core::tls::upstream::upstream_tls(t, &target.host) {
                    errors.push(format!("upstreams.{}.tls: {e}", u.name));
                    break;
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn init_logging(format: LogFormat) {
    // The redis client logs a WARN line per request and per reconnect attempt while a node is
    // away (hundreds per second): its errors only. Each node's change of state is logged
    // once by the store (`redis_down`, `redis_up`, with the node).
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,redis=error"));
    // Library heads and bodies at debug, and client-caused storms: see logguard.
    let guard = tollgate_core::observe::logguard::Guard {
        unredacted: std::env::var_os("TOLLGATE_LOG_UNREDACTED").is_some_and(|v| v == "1"),
    };
    // Colour only for a person at a terminal: a log file or a collector gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let layer = match format {
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(tracing_subscriber::filter::FilterExt::and(filter, guard)))
        .init();
}

fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("TOLLGATE_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
}

fn load(path: &Path) -> anyhow::Result<Config> {
    tollgate_config::load_file(path).map_err(|e| anyhow::anyhow!("invalid config:\n{e}"))
}

/// What a config loads with but should not: said once at start.
fn warn_of(cfg: &Config) {
    for w in tollgate_config::rewrite_warnings(cfg) {
        tracing::warn!(event = "rewrite_reaches_guarded_path", "{w}");
    }
    for w in tollgate_config::weak_hash_warnings(cfg) {
        tracing::warn!(event = "weak_password_hash", "{w}");
    }
}

/// The admin listener (metrics, health, explain), on one thread.
fn admin_service(
    addr: std::net::SocketAddr,
    shared: &Arc<Shared>,
    draining: &Arc<AtomicBool>,
) -> Service<Admin> {
    let mut admin = Service::new(
        "tollgate admin".to_string(),
        Admin::new(shared.clone(), draining.clone()),
    );
    admin.add_tcp(&addr.to_string());
    admin.threads = Some(1);
    admin
}

fn run(config: Option<PathBuf>, upgrade: bool, kube: kubernetes::KubeArgs) -> anyhow::Result<()> {
    if kube.kubernetes {
        kube.options(false).map_err(anyhow::Error::msg)?;
    }
    // A controller's BASE.toml is optional: without one, the cluster's Ingresses alone.
    let (path, cluster) = if kube.kubernetes {
        let base = config.unwrap_or_else(|| PathBuf::from("/dev/null"));
        (base, Some(Arc::new(kubernetes::Cluster::default())))
    } else {
        (config_path(config), None)
    };
    let cfg = match &cluster {
        Some(c) => c.load(&path)?,
        None => load(&path)?,
    };
    warn_of(&cfg);
    raise_fd_limit(cfg.server.hardening.max_connections);
    if !upgrade {
        // Pingora binds in a listener thread that retries forever on failure; say it here and
        // stop instead. (On --upgrade the sockets come from the old process.)
        bindable(&cfg)?;
    }
    // As read: a change from here on is seen by the watcher.
    let seen = std::sync::Mutex::new(fingerprint(&path, &cfg.files));
    let server_cfg = cfg.server.clone();

    let shared = Arc::new(
        Shared::new(cfg, Arc::new(tollgate_limit::MonotonicClock::new()))
            .context("building the runtime")?,
    );
    release_freed();
    shared
        .kube_syncing
        .store(cluster.is_some(), Ordering::Relaxed);
    let reloader = Arc::new(Reloader {
        shared: shared.clone(),
        path: path.clone(),
        cluster: cluster.clone(),
        seen,
        pending: std::sync::Mutex::new(None),
        busy: std::sync::Mutex::new(()),
    });

    let conf = server_conf(&server_cfg);
    let opt = Opt {
        upgrade,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();

    let mut proxy = proxy_service(&server, &shared, &server_cfg)?;
    proxy.threads = Some(server_cfg.threads);
    server.add_service(proxy);

    let draining = Arc::new(AtomicBool::new(false));
    if let Some(admin_addr) = server_cfg.admin {
        server.add_service(admin_service(admin_addr, &shared, &draining));
    }
    server.add_service(background_service(
        "health checks",
        Housekeeping::new(shared.clone()),
    ));
    if let Some(cluster) = cluster {
        server.add_service(background_service(
            "kubernetes controller",
            kubernetes::Controller {
                args: kube,
                reloader: reloader.clone(),
                cluster,
                added: Arc::new(added::Added::new(
                    proxy_app(&server, &shared, &server_cfg),
                    shared.clone(),
                    &server_cfg,
                )),
            },
        ));
    }
    let rls_listen = rls_service(&mut server, &shared)?;

    tracing::info!(
        config = %path.display(),
        listen = ?server_cfg.listen,
        tls_listen = ?server_cfg.tls_listen,
        admin = ?server_cfg.admin,
        rls = ?rls_listen,
        threads = server_cfg.threads,
        "tollgate serving"
    );
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals { reloader, draining }),
    });
    Ok(())
}

/// `[rls]`'s gRPC service, bound here: an address in use fails the start, loudly.
fn rls_service(
    server: &mut Server,
    shared: &Arc<Shared>,
) -> anyhow::Result<Option<std::net::SocketAddr>> {
    let rls = shared
        .runtime
        .load()
        .config
        .rls
        .as_ref()
        .map(|r| (r.listen, r.tls));
    let Some((addr, tls)) = rls else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("rls.listen {addr}: cannot listen"))?;
    server.add_service(background_service(
        "rate limit service",
        tollgate_rls::RlsServer::new(shared.clone(), listener, tls),
    ));
    Ok(Some(addr))
}

/// Pingora's server settings from `[server]`.
fn server_conf(server_cfg: &ServerConfig) -> ServerConf {
    ServerConf {
        threads: server_cfg.threads,
        // One runtime per thread: no cross-thread task stealing on the hot path.
        work_stealing: false,
        // An accept loop per thread: one loop alone falls behind a burst of connections
        // (the kernel's accept queue overflows and clients retry their SYN seconds later).
        listener_tasks_per_fd: server_cfg.threads,
        // Pingora sleeps the whole grace period, then gives runtimes the shutdown timeout:
        // split grace_period between them so SIGTERM ends within it.
        grace_period_seconds: Some(server_cfg.grace_period.as_secs().saturating_sub(1)),
        graceful_shutdown_timeout_seconds: Some(server_cfg.grace_period.as_secs().min(1)),
        upgrade_sock: server_cfg.upgrade_sock.display().to_string(),
        // Every deadline of a second or more on tokio's timer wheel (per runtime: no lock
        // shared across threads) instead of Pingora's fast timers: ~500 fewer instructions
        // per proxied request (bench/README.md). Shorter deadlines and Pingora's own
        // `sleep`s stay on the fast timers (rounded up to their 10 ms tick).
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        ..ServerConf::default()
    }
}

/// The gateway as Pingora serves it, with the hardening's HTTP options: one for the
/// listeners of the config, one for those a Gateway adds ([`added`]).
fn proxy_app(
    server: &Server,
    shared: &Arc<Shared>,
    server_cfg: &ServerConfig,
) -> HttpProxy<Gateway> {
    let mut app = pingora::proxy::http_proxy(&server.configuration, Gateway::new(shared.clone()));
    let h = &server_cfg.hardening;
    let mut opts = HttpServerOptions::default();
    opts.h2c = server_cfg.h2c;
    opts.header_timeout = Some(h.header_timeout);
    opts.keepalive_timeout = Some(h.idle_timeout.as_secs().max(1));
    opts.h2_idle_timeout = Some(h.idle_timeout);
    opts.max_header_bytes = Some(h.max_header_bytes);
    opts.max_headers = Some(h.max_headers);
    opts.preserve_header_case = Some(server_cfg.preserve_header_case);
    app.server_options = Some(opts);
    let mut h2 = pingora::protocols::http::v2::server::default_h2_options();
    h2.max_concurrent_streams(h.max_h2_streams as u32);
    h2.max_header_list_size(h.max_header_bytes as u32);
    app.h2_options = Some(h2);
    app
}

/// The proxy service: the gateway with the hardening's HTTP options, connection admission,
/// and its TLS and plain listeners.
fn proxy_service(
    server: &Server,
    shared: &Arc<Shared>,
    server_cfg: &ServerConfig,
) -> anyhow::Result<Service<HttpProxy<Gateway>>> {
    let app = proxy_app(server, shared, server_cfg);
    let mut proxy = Service::new("tollgate proxy".to_string(), app);
    let h = &server_cfg.hardening;
    // Connection bounds at accept: a refused connection is closed before it is read (or its
    // TLS handshake begins), and a slot is held for the connection's whole life.
    proxy.set_connection_admission(Arc::new(tollgate_proxy::shared::Admission::new(
        shared.clone(),
    )));
    if let Some(certs) = &shared.tls {
        let tls = certs
            .server_config()
            .map_err(|e| anyhow::anyhow!("TLS settings: {e}"))?;
        // [[tls_passthrough]]: a ClientHello naming a passed-through host is relayed unread
        // (vendor/patches/0017); without such hosts nothing is read before the handshake.
        proxy
            .endpoints()
            .set_pre_tls_callback(Arc::new(tollgate_proxy::passthrough::Front::new(
                shared.clone(),
            )));
        for addr in &server_cfg.tls_listen {
            // The whole TLS handshake gets the head's deadline: a silent client is closed
            // after header_timeout, not Pingora's 60 s (vendor/patches/0005).
            let mut settings = TlsSettings::from_server_config(tls.clone());
            // The client's certificate kept with its connection, for the routes that tell
            // the upstream about it (vendor/patches/0016).
            settings.set_callbacks(Box::new(tollgate_core::tls::client_cert::KeepClientCert));
            proxy.add_listener(
                ListenerConfig::tcp(addr.to_string())
                    .tls(settings)
                    .handshake_timeout(h.header_timeout)
                    .l4_buffer(L4BufferSettings::new(
                        L4_READ_BUFFER,
                        pingora::listeners::DEFAULT_L4_WRITE_BUFFER_SIZE,
                    )),
            );
        }
    }
    for addr in &server_cfg.listen {
        // Pingora's default 64 KiB read buffer per connection made an idle connection cost
        // ~77 KiB; the head and body are read into buffers of their own, so a small one is
        // enough (bench/README.md, "Idle connections").
        proxy.add_listener(
            ListenerConfig::tcp(addr.to_string()).l4_buffer(L4BufferSettings::new(
                L4_READ_BUFFER,
                pingora::listeners::DEFAULT_L4_WRITE_BUFFER_SIZE,
            )),
        );
    }
    Ok(proxy)
}

/// Every listening address can be bound now: a clear error and a non-zero exit otherwise.
fn bindable(cfg: &Config) -> anyhow::Result<()> {
    let admin = cfg.server.admin.iter().map(|a| (a, "server.admin"));
    for (addr, key) in cfg
        .server
        .listen
        .iter()
        .map(|a| (a, "server.listen"))
        .chain(admin)
    {
        // Pingora sets SO_REUSEADDR too: a socket in TIME_WAIT is no reason to refuse.
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(*addr),
            socket2::Type::STREAM,
            None,
        )?;
        sock.set_reuse_address(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.bind(&(*addr).into())
            .and_then(|_| sock.listen(1))
            .with_context(|| format!("{key}: cannot listen on {addr}"))?;
    }
    Ok(())
}

/// Open connections need file descriptors: the soft limit is raised to the hard one (as
/// nginx's worker_rlimit_nofile), and a limit below max_connections is said at start.
#[allow(unsafe_code)]
fn raise_fd_limit(max_connections: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let fits = tollgate_core::connections::connections_for_fds(lim.rlim_cur);
    tollgate_core::connections::set_fd_ceiling(fits);
    if fits < max_connections {
        tracing::warn!(
            event = "max_connections_lowered",
            nofile = lim.rlim_cur,
            configured = max_connections,
            enforced = fits.max(1),
            "the open-file limit cannot hold max_connections (2 descriptors per proxied connection, {} kept for the rest): at most {} connections are admitted; raise the limit (ulimit -n, LimitNOFILE=) to serve more",
            tollgate_core::connections::FD_RESERVE,
            fits.max(1)
        );
    }
}

/// Unix signals: SIGHUP reloads; SIGTERM drains; SIGINT stops at once; SIGQUIT hands the
/// listeners to a process started with `--upgrade`.
struct Signals {
    reloader: Arc<Reloader>,
    draining: Arc<AtomicBool>,
}

/// Reloads the config; shared with the blocking threads reloads run on (reading files and
/// resolving upstream names must not hold up the signal task: a SIGTERM still drains at once).
struct Reloader {
    shared: Arc<Shared>,
    /// The config file (BASE.toml under --kubernetes).
    path: PathBuf,
    /// Under --kubernetes: the cluster's part, added to the file's.
    cluster: Option<Arc<kubernetes::Cluster>>,
    /// The config's files as last loaded (or tried): the watcher reloads when they change.
    seen: std::sync::Mutex<u64>,
    /// A change seen once, waiting to be seen unchanged a second time.
    pending: std::sync::Mutex<Option<u64>>,
    /// One reload (or look) at a time.
    busy: std::sync::Mutex<()>,
}

/// How often the config file and the files it reads are looked at.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// What the config file and every file it read (list files, key files) look like
/// ([`tollgate_core::tls::listener::stamp`]).
fn fingerprint(config: &Path, files: &[PathBuf]) -> u64 {
    let paths: Vec<&Path> = std::iter::once(config)
        .chain(files.iter().map(PathBuf::as_path))
        .collect();
    tollgate_core::tls::listener::stamp(&paths)
}

impl Reloader {
    /// Reloads when the files changed and then stayed the same for one look (a file being
    /// written is not read half-way).
    fn watch(&self) {
        if let Some(certs) = &self.shared.tls {
            certs.watch();
        }
        // A look while a reload runs would only see that reload's own changes.
        let Ok(_busy) = self.busy.try_lock() else {
            return;
        };
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        let files = self.shared.runtime.load().config.files.clone();
        let now = fingerprint(&self.path, &files);
        let seen = self.seen.lock().map(|g| *g).unwrap_or(now);
        if now == seen {
            *pending = None;
            return;
        }
        if *pending == Some(now) {
            *pending = None;
            tracing::info!(event = "config_changed", config = %self.path.display(), "a config file changed: reloading");
            self.reload_now();
        } else {
            *pending = Some(now);
        }
    }

    /// A reload asked for (SIGHUP, a cluster change): after the one running, if any. Whether
    /// the new config serves.
    fn reload(&self) -> bool {
        let _busy = self.busy.lock();
        self.reload_now()
    }

    fn load(&self) -> anyhow::Result<Config> {
        match &self.cluster {
            Some(c) => c.load(&self.path),
            None => load(&self.path),
        }
    }

    fn reload_now(&self) -> bool {
        // Whatever the outcome, the version read is the one seen: an invalid file is not
        // retried until it changes again. (Taken before reading: a change made while this
        // reload runs is seen afterwards.)
        let files = self.shared.runtime.load().config.files.clone();
        let before = fingerprint(&self.path, &files);
        if let Ok(mut g) = self.seen.lock() {
            *g = before;
        }
        let started = std::time::Instant::now();
        let cfg = match self.load() {
            Ok(cfg) => cfg,
            Err(e) => {
                self.shared
                    .metrics
                    .reloads
                    .with_label_values(&["error"])
                    .inc();
                tracing::error!(event = "reload_failed", error = %e, "config rejected; the old one keeps serving");
                // A rejected file was parsed too: its pages go back as well.
                release_freed();
                return false;
            }
        };
        let old = self.shared.runtime.load();
        // Declared beside the fields they name (tollgate_config::model::restart_only_changes).
        let fixed = tollgate_config::model::restart_only_changes(&old.config, &cfg);
        for key in fixed {
            tracing::warn!(
                event = "reload_needs_restart",
                key,
                "this setting changes only on restart or --upgrade; the rest of the file is applied"
            );
        }
        drop(old);
        let new_files = cfg.files.clone();
        let served = match self.shared.reload(cfg) {
            Ok(()) => {
                // The new config may read other files: they are watched from now on, unless
                // something changed while it was read (then the next look reloads again).
                if fingerprint(&self.path, &files) == before {
                    if let Ok(mut g) = self.seen.lock() {
                        *g = fingerprint(&self.path, &new_files);
                    }
                }
                tracing::info!(
                    event = "reloaded",
                    config = %self.path.display(),
                    ms = started.elapsed().as_secs_f64() * 1000.0,
                    "config reloaded"
                );
                true
            }
            Err(e) => {
                tracing::error!(event = "reload_failed", error = %e, "config rejected; the old one keeps serving");
                false
            }
        };
        release_freed();
        served
    }
}

/// Pingora's graceful terminate stops the listeners, then sleeps the whole grace period before
/// ending. The grace period is a deadline, not a duration: once no request is in flight (twice
/// in a row, 50 ms apart, after the listeners had time to close), exit at once. If requests are
/// still running when the grace period ends, Pingora's own shutdown takes over.
/// SIGINT means now: Pingora's runtime shutdown can hang behind a busy listener loop
/// ("Accept() failed ... being shutdown") on a loaded machine, so the process exits after a
/// second whatever is left.
fn exit_soon() {
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(1));
        tracing::warn!(
            event = "stopped",
            "runtimes still stopping after 1 s: exiting"
        );
        std::process::exit(0);
    });
}

fn exit_when_drained() {
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut idle = 0;
        loop {
            if tollgate_proxy::ctx::in_flight() == 0 {
                idle += 1;
                if idle >= 2 {
                    tracing::info!(event = "drained", "no request in flight: exiting");
                    std::process::exit(0);
                }
            } else {
                idle = 0;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
}

#[async_trait::async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let (Ok(mut hup), Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::hangup()),
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot install signal handlers; stopping");
            return ShutdownSignal::FastShutdown;
        };
        // Until here a signal meets its default action (or is ignored if the parent ignored
        // it): tests and supervisors can wait for this line before signalling.
        tracing::info!(event = "signals_ready", "signal handlers installed");
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // On blocking threads, not awaited: a slow reload (files, DNS) never holds up
                // a SIGTERM.
                _ = tick.tick() => {
                    let r = self.reloader.clone();
                    tokio::task::spawn_blocking(move || r.watch());
                }
                _ = hup.recv() => {
                    let r = self.reloader.clone();
                    tokio::task::spawn_blocking(move || { r.reload(); });
                }
                _ = term.recv() => {
                    self.draining.store(true, Ordering::Relaxed);
                    tracing::info!(event = "draining", "SIGTERM: draining");
                    exit_when_drained();
                    return ShutdownSignal::GracefulTerminate;
                }
                _ = int.recv() => {
                    tracing::info!(event = "stopping", "SIGINT: stopping now");
                    exit_soon();
                    return ShutdownSignal::FastShutdown;
                }
                _ = quit.recv() => {
                    self.draining.store(true, Ordering::Relaxed);
                    tracing::info!(event = "upgrading", "SIGQUIT: handing listeners over");
                    return ShutdownSignal::GracefulUpgrade;
                }
            }
        }
    }
}
