//! `[plans]`: what each caller paid for.

use super::limits::KeySource;
use tollgate_limit::Rate;

/// Plans, and how a caller's plan is found: the tenant's entry in `tenants`, else the plan
/// named by `from`, else `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plans {
    pub names: Vec<String>,
    pub defs: Vec<PlanDef>,
    /// Index into `names`.
    pub default: usize,
    /// A key source whose value names the caller's plan (e.g. `jwt:plan`).
    pub from: Option<KeySource>,
    /// A key source whose value names the caller's tenant, looked up in `tenants`.
    pub tenant: Option<KeySource>,
    /// Tenant -> plan index (a tenant with custom terms has a plan of its own).
    pub tenants: Vec<(String, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanDef {
    pub rate: Option<Rate>,
    pub burst: u64,
    pub quota: Option<(u64, tollgate_limit::CalendarUnit)>,
}
