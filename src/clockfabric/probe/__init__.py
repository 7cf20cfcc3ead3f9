"""UDP probing with kernel timestamps: coded probe pairs between hosts, on chosen paths."""
