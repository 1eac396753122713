//! The `-v` summary of a pass.

use super::*;

/// "; time per route: copy 78.0 MiB in 22.51 ms (0.289 ms/MiB; source: 60.0
/// MiB copied from 2 MiB page-cache folios, 18.0 MiB read with pread)" for
/// each route that ran: the bytes it made huge, its time and the time per
/// MiB (a route that made nothing huge in under 10 µs is left out); for
/// `copy`, where its bytes came from.
pub(super) fn route_times<const N: usize>(o: &mut Out<N>, t: &Totals) {
    let names = ["already", "file", "collapse", "copy"];
    let bytes = [t.already, t.file, t.collapse, t.copy];
    let mut first = true;
    for i in 0..4 {
        if t.ns[i] == 0 || (bytes[i] == 0 && t.ns[i] < 10_000) {
            continue; // did not run, or only measured in no time
        }
        o.s(if first { "; time per route: " } else { ", " })
            .s(names[i])
            .s(" ")
            .mib(bytes[i])
            .s(" in ")
            .ms(t.ns[i]);
        first = false;
        if bytes[i] > 0 {
            // Thousandths of a ms per MiB.
            let per = (t.ns[i] as u128 * (1 << 20) / bytes[i] as u128 / 1000) as u64;
            o.s(" (").u(per / 1000).s(".");
            for d in [100, 10, 1] {
                o.u(per % 1000 / d % 10);
            }
            o.s(" ms/MiB");
            if i == 3 {
                let mapped = bytes[i].saturating_sub(t.copy_pmd + t.copy_read);
                let mut sep = "; source: ";
                for (b, what) in [
                    (t.copy_pmd, [" copied from ", " page-cache folios"]),
                    (t.copy_read, [" read with pread", ""]),
                    (mapped, [" copied from the text mapped in ", " pages"]),
                ] {
                    if b >= 1 << 16 {
                        o.s(sep).mib(b).s(what[0]);
                        if !what[1].is_empty() {
                            let unit = if what[1].contains("cache") {
                                scan::pmd()
                            } else {
                                scan::page()
                            };
                            o.size(unit as u64).s(what[1]);
                        }
                        sep = ", ";
                    }
                }
            }
            o.s(")");
        }
    }
}
