//! `warm`: put programs' text (and their libraries') into PMD-sized page-cache
//! folios and verify the result.
