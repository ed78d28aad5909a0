"""Dynamic MIG: the hardware facts (:mod:`.model`), pure decisions (:mod:`.decide`), the
interface a backend implements (:mod:`.control`), its fake and NVML implementations, and the
shell that serialises every layout change (:mod:`.manager`)."""
