//! GC value maps: reasons, types, suspension reasons and the packed condemn reasons.

use std::fmt;

macro_rules! value_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $val:literal => $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)*
            /// A value not in the map (newer runtimes add values).
            Other(u32),
        }

        impl $name {
            pub fn from_u32(v: u32) -> Self {
                match v {
                    $($val => $name::$variant,)*
                    other => $name::Other(other),
                }
            }

            pub fn value(self) -> u32 {
                match self {
                    $($name::$variant => $val,)*
                    $name::Other(v) => v,
                }
            }

            /// The name used by the manifest / runtime (for `Other`, "Unknown").
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                    $name::Other(_) => "Unknown",
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $name::Other(v) => write!(f, "Unknown({v})"),
                    other => f.write_str(other.name()),
                }
            }
        }
    };
}

value_enum! {
    /// Why a GC was triggered (GCStart.Reason, GCTriggered.Reason, GCGlobalHeapHistory.Reason).
    /// 0..=9 are the manifest's GCReasonMap; 10..=17 are the runtime's `gc_reason` values
    /// (src/coreclr/gc/gcinterface.h) that the manifest map does not list.
    GcReason {
        AllocSmall = 0 => "AllocSmall",
        Induced = 1 => "Induced",
        LowMemory = 2 => "LowMemory",
        Empty = 3 => "Empty",
        AllocLarge = 4 => "AllocLarge",
        OutOfSpaceSoh = 5 => "OutOfSpaceSOH",
        OutOfSpaceLoh = 6 => "OutOfSpaceLOH",
        InducedNoForce = 7 => "InducedNoForce",
        Stress = 8 => "Stress",
        InducedLowMemory = 9 => "InducedLowMemory",
        InducedCompacting = 10 => "InducedCompacting",
        LowMemoryHost = 11 => "LowMemoryHost",
        PmFullGc = 12 => "PMFullGC",
        LowMemoryHostBlocking = 13 => "LowMemoryHostBlocking",
        BgcTuningSoh = 14 => "BGCTuningSOH",
        BgcTuningLoh = 15 => "BGCTuningLOH",
        BgcStepping = 16 => "BGCStepping",
        InducedAggressive = 17 => "InducedAggressive",
    }
}

value_enum! {
    /// GCStart.Type (GCTypeMap).
    GcType {
        NonConcurrent = 0 => "NonConcurrentGC",
        Background = 1 => "BackgroundGC",
        Foreground = 2 => "ForegroundGC",
    }
}

value_enum! {
    /// GCSuspendEEBegin.Reason (GCSuspendEEReasonMap).
    SuspendReason {
        SuspendOther = 0 => "SuspendOther",
        ForGc = 1 => "SuspendForGC",
        ForAppDomainShutdown = 2 => "SuspendForAppDomainShutdown",
        ForCodePitching = 3 => "SuspendForCodePitching",
        ForShutdown = 4 => "SuspendForShutdown",
        ForDebugger = 5 => "SuspendForDebugger",
        ForGcPrep = 6 => "SuspendForGCPrep",
        ForDebuggerSweep = 7 => "SuspendForDebuggerSweep",
    }
}

value_enum! {
    /// Why a heap was compacted (runtime `gc_heap_compact_reason`, from GCPerHeapHistory's
    /// CompactMechanisms).
    CompactReason {
        LowEphemeral = 0 => "compact_low_ephemeral",
        HighFragmentation = 1 => "compact_high_frag",
        NoGaps = 2 => "compact_no_gaps",
        LohForced = 3 => "compact_loh_forced",
        LastGc = 4 => "compact_last_gc",
        InducedCompacting = 5 => "compact_induced_compacting",
        FragmentedGen0 = 6 => "compact_fragmented_gen0",
        HighMemoryLoad = 7 => "compact_high_mem_load",
        HighMemoryFragmentation = 8 => "compact_high_mem_frag",
        VeryHighMemoryFragmentation = 9 => "compact_vhigh_mem_frag",
        NoGcMode = 10 => "compact_no_gc_mode",
    }
}

value_enum! {
    /// How a heap was expanded (runtime `gc_heap_expand_mechanism`, from GCPerHeapHistory's
    /// ExpandMechanisms).
    ExpandMechanism {
        ReuseNormal = 0 => "expand_reuse_normal",
        ReuseBestFit = 1 => "expand_reuse_bestfit",
        NewSegmentEphemeralPromotion = 2 => "expand_new_seg_ep",
        NewSegment = 3 => "expand_new_seg",
        NoMemory = 4 => "expand_no_memory",
        NextFullGc = 5 => "expand_next_full_gc",
    }
}

/// Decodes a per-heap mechanism word: the top bit says the operation happened, and the index
/// of the highest other set bit is the reason. `None` when the operation did not happen.
pub fn mechanism_index(word: u32) -> Option<u32> {
    const DONE: u32 = 1 << 31;
    let rest = word & !DONE;
    if word & DONE == 0 || rest == 0 {
        return None;
    }
    Some(31 - rest.leading_zeros())
}

/// GCGlobalHeapHistory.GlobalMechanisms bits (runtime `gc_global_mechanism_p`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GlobalMechanisms(pub u32);

impl GlobalMechanisms {
    pub const CONCURRENT: u32 = 1 << 0;
    pub const COMPACTION: u32 = 1 << 1;
    pub const PROMOTION: u32 = 1 << 2;
    pub const DEMOTION: u32 = 1 << 3;
    pub const CARD_BUNDLES: u32 = 1 << 4;
    pub const ELEVATION: u32 = 1 << 5;

    /// Names of the set bits, in bit order.
    pub fn names(self) -> Vec<&'static str> {
        const NAMES: [&str; 6] = [
            "Concurrent",
            "Compaction",
            "Promotion",
            "Demotion",
            "CardBundles",
            "Elevation",
        ];
        (0..6)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| NAMES[b as usize])
            .collect()
    }
}

/// One boolean condition of `CondemnReasons1` (runtime `gc_condemn_reason_condition`, bit index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CondemnCondition {
    InducedFullGc = 0,
    ExpandFullGc = 1,
    HighMemory = 2,
    VeryHighMemory = 3,
    LowEphemeral = 4,
    LowCard = 5,
    EphemeralHighFragmentation = 6,
    MaxHighFragmentation = 7,
    MaxHighFragmentationEstimate = 8,
    MaxHighFragmentationMemory = 9,
    MaxHighFragmentationVeryHighMemory = 10,
    MaxGen1 = 11,
    BeforeOom = 12,
    Gen2TooSmall = 13,
    InducedNoForce = 14,
    BeforeBgc = 15,
    AlmostMaxAlloc = 16,
    AvoidUnproductive = 17,
    PmInducedFullGc = 18,
    PmAllocLoh = 19,
    Gen1InPm = 20,
    LimitBeforeOom = 21,
    LimitLohFragmentation = 22,
    LimitLohReclaim = 23,
    ServoInitial = 24,
    ServoNgc = 25,
    ServoBgc = 26,
    ServoPostpone = 27,
    StressMix = 28,
    Stress = 29,
}

impl CondemnCondition {
    pub const ALL: [CondemnCondition; 30] = {
        use CondemnCondition::*;
        [
            InducedFullGc,
            ExpandFullGc,
            HighMemory,
            VeryHighMemory,
            LowEphemeral,
            LowCard,
            EphemeralHighFragmentation,
            MaxHighFragmentation,
            MaxHighFragmentationEstimate,
            MaxHighFragmentationMemory,
            MaxHighFragmentationVeryHighMemory,
            MaxGen1,
            BeforeOom,
            Gen2TooSmall,
            InducedNoForce,
            BeforeBgc,
            AlmostMaxAlloc,
            AvoidUnproductive,
            PmInducedFullGc,
            PmAllocLoh,
            Gen1InPm,
            LimitBeforeOom,
            LimitLohFragmentation,
            LimitLohReclaim,
            ServoInitial,
            ServoNgc,
            ServoBgc,
            ServoPostpone,
            StressMix,
            Stress,
        ]
    };

    pub fn bit(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        use CondemnCondition::*;
        match self {
            InducedFullGc => "induced_fullgc",
            ExpandFullGc => "expand_fullgc",
            HighMemory => "high_mem",
            VeryHighMemory => "very_high_mem",
            LowEphemeral => "low_ephemeral",
            LowCard => "low_card",
            EphemeralHighFragmentation => "eph_high_frag",
            MaxHighFragmentation => "max_high_frag",
            MaxHighFragmentationEstimate => "max_high_frag_e",
            MaxHighFragmentationMemory => "max_high_frag_m",
            MaxHighFragmentationVeryHighMemory => "max_high_frag_vm",
            MaxGen1 => "max_gen1",
            BeforeOom => "before_oom",
            Gen2TooSmall => "gen2_too_small",
            InducedNoForce => "induced_noforce",
            BeforeBgc => "before_bgc",
            AlmostMaxAlloc => "almost_max_alloc",
            AvoidUnproductive => "avoid_unproductive",
            PmInducedFullGc => "pm_induced_fullgc",
            PmAllocLoh => "pm_alloc_loh",
            Gen1InPm => "gen1_in_pm",
            LimitBeforeOom => "limit_before_oom",
            LimitLohFragmentation => "limit_loh_frag",
            LimitLohReclaim => "limit_loh_reclaim",
            ServoInitial => "servo_initial",
            ServoNgc => "servo_ngc",
            ServoBgc => "servo_bgc",
            ServoPostpone => "servo_postpone",
            StressMix => "stress_mix",
            Stress => "stress",
        }
    }
}

/// The two packed condemn-reason words of GCPerHeapHistory / GCGlobalHeapHistory V3+.
///
/// `generations` (CondemnReasons0) holds four 2-bit generation numbers; `conditions`
/// (CondemnReasons1) one bit per [`CondemnCondition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CondemnReasons {
    pub generations: u32,
    pub conditions: u32,
}

impl CondemnReasons {
    fn gen_at(self, index: u32) -> u8 {
        ((self.generations >> (index * 2)) & 0x3) as u8
    }

    /// The generation the GC initially decided to condemn.
    pub fn initial_generation(self) -> u8 {
        self.gen_at(0)
    }

    /// The final generation condemned on this heap.
    pub fn final_generation_per_heap(self) -> u8 {
        self.gen_at(1)
    }

    /// The generation whose allocation budget was exceeded.
    pub fn alloc_budget_generation(self) -> u8 {
        self.gen_at(2)
    }

    /// The generation chosen by time-based tuning.
    pub fn time_tuning_generation(self) -> u8 {
        self.gen_at(3)
    }

    pub fn has(self, c: CondemnCondition) -> bool {
        self.conditions & (1 << c.bit()) != 0
    }

    /// The named conditions whose bit is set.
    pub fn conditions(self) -> impl Iterator<Item = CondemnCondition> {
        CondemnCondition::ALL
            .into_iter()
            .filter(move |c| self.has(*c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_and_unknowns() {
        assert_eq!(GcReason::from_u32(0).name(), "AllocSmall");
        assert_eq!(GcReason::from_u32(6), GcReason::OutOfSpaceLoh);
        assert_eq!(GcReason::from_u32(17), GcReason::InducedAggressive);
        assert_eq!(GcReason::from_u32(99), GcReason::Other(99));
        assert_eq!(GcReason::from_u32(99).to_string(), "Unknown(99)");
        for v in 0..=17 {
            assert_eq!(GcReason::from_u32(v).value(), v);
            assert!(!matches!(GcReason::from_u32(v), GcReason::Other(_)));
        }
        assert_eq!(GcType::from_u32(1).to_string(), "BackgroundGC");
        assert_eq!(SuspendReason::from_u32(1), SuspendReason::ForGc);
    }

    #[test]
    fn mechanisms() {
        assert_eq!(mechanism_index(0), None);
        assert_eq!(mechanism_index(0x8000_0000), None);
        assert_eq!(
            mechanism_index(0x0000_0002),
            None,
            "top bit clear: not done"
        );
        assert_eq!(mechanism_index(0x8000_0002), Some(1));
        assert_eq!(CompactReason::from_u32(1).name(), "compact_high_frag");
        assert_eq!(ExpandMechanism::from_u32(3), ExpandMechanism::NewSegment);
        assert_eq!(
            GlobalMechanisms(0b10110).names(),
            ["Compaction", "Promotion", "CardBundles"]
        );
    }

    #[test]
    fn condemn_reasons_unpack() {
        // initial 1, final 2, budget 0, time 1; conditions: high_mem (2), before_bgc (15).
        let r = CondemnReasons {
            generations: 1 | (2 << 2) | (1 << 6),
            conditions: (1 << 2) | (1 << 15),
        };
        assert_eq!(r.initial_generation(), 1);
        assert_eq!(r.final_generation_per_heap(), 2);
        assert_eq!(r.alloc_budget_generation(), 0);
        assert_eq!(r.time_tuning_generation(), 1);
        let c: Vec<_> = r.conditions().collect();
        assert_eq!(
            c,
            vec![CondemnCondition::HighMemory, CondemnCondition::BeforeBgc]
        );
        for (i, c) in CondemnCondition::ALL.iter().enumerate() {
            assert_eq!(c.bit() as usize, i);
        }
    }
}
