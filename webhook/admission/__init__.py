"""The admission layer: AdmissionReview shapes, the pod mutation, the namespace opt-in gate."""
