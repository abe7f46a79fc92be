//! TLS session resumption whose keys and cache are made anew when the client verifier
//! changes.

use arc_swap::ArcSwap;
use std::sync::Arc;

/// Session resumption (TLS 1.3 tickets, TLS 1.2 session IDs) whose keys and cache are made
/// anew whenever the client verifier changes: a session resumes the client certificate it was
/// made with, so after `client_ca` or `client_auth` changes no earlier session may resume.
#[derive(Debug)]
pub(super) struct Resumption {
    tickets: ArcSwap<Arc<dyn rustls::server::ProducesTickets>>,
    sessions: ArcSwap<Arc<rustls::server::ServerSessionMemoryCache>>,
}

/// Sessions kept per process for TLS 1.2 resumption by ID.
const SESSION_CACHE: usize = 4096;

impl Resumption {
    pub(super) fn new() -> Result<Self, String> {
        Ok(Resumption {
            tickets: ArcSwap::from_pointee(Self::ticketer()?),
            sessions: ArcSwap::from_pointee(rustls::server::ServerSessionMemoryCache::new(
                SESSION_CACHE,
            )),
        })
    }

    fn ticketer() -> Result<Arc<dyn rustls::server::ProducesTickets>, String> {
        rustls::crypto::ring::Ticketer::new().map_err(|e| e.to_string())
    }

    /// Every session and ticket issued so far stops resuming.
    pub(super) fn renew(&self) {
        match Self::ticketer() {
            Ok(t) => self.tickets.store(Arc::new(t)),
            // Without new keys, no tickets at all rather than old ones.
            Err(_) => self.tickets.store(Arc::new(Arc::new(NoTickets))),
        }
        self.sessions
            .store(Arc::new(rustls::server::ServerSessionMemoryCache::new(
                SESSION_CACHE,
            )));
    }
}

#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

#[derive(Debug)]
pub(super) struct Tickets(pub(super) Arc<Resumption>);

impl rustls::server::ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        self.0.tickets.load().enabled()
    }
    fn lifetime(&self) -> u32 {
        self.0.tickets.load().lifetime()
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.0.tickets.load().encrypt(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.0.tickets.load().decrypt(cipher)
    }
}

#[derive(Debug)]
pub(super) struct Sessions(pub(super) Arc<Resumption>);

impl rustls::server::StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.0.sessions.load().put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.sessions.load().get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.sessions.load().take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}
