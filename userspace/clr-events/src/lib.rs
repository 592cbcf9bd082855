//! Decoders of CoreCLR runtime event payloads, shared by the EventPipe and ETW sources.
