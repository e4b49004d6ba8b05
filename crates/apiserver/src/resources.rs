//! The resource types the server serves (being written).
